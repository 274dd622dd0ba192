package console

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// An issuer endpoint over plain http is allowed to loopback, except in the
// agent's pod, whose loopback the agent shares.
func TestCheckEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name      string
		url       string
		ok, okPod bool
	}{
		{name: "https", url: "https://id.example/token", ok: true, okPod: true},
		{name: "https on loopback", url: "https://localhost:8443/token", ok: true, okPod: true},
		{name: "http on localhost", url: "http://localhost:5556/token", ok: true},
		{name: "http on 127.0.0.1", url: "http://127.0.0.1:5556/token", ok: true},
		{name: "http on ::1", url: "http://[::1]:5556/token", ok: true},
		{name: "http elsewhere", url: "http://id.example/token"},
		{name: "not absolute", url: "/token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkEndpoint(tc.url, false); (err == nil) != tc.ok {
				t.Errorf("checkEndpoint(%q, outside the pod) = %v, want ok=%v", tc.url, err, tc.ok)
			}
			if err := checkEndpoint(tc.url, true); (err == nil) != tc.okPod {
				t.Errorf("checkEndpoint(%q, in the agent's pod) = %v, want ok=%v", tc.url, err, tc.okPod)
			}
		})
	}
}

// keyOnly is a Store that holds the OIDC cookie's key and nothing else.
type keyOnly struct{ Store }

func (keyOnly) ConsoleKey(_ context.Context, _ string, candidate []byte) ([]byte, error) {
	return candidate, nil
}

// A sealed sign-in is one only with the binding of the tab that started
// it: the callback could hand its key to no page without one (a cookie
// sealed before bindings existed, say), so it is no sign-in at all.
func TestSealedSignInNeedsABinding(t *testing.T) {
	f := &oidcFlow{c: &Console{o: Options{Store: keyOnly{}, Now: time.Now}}}
	ok := pending{State: "s", Nonce: "n", Verifier: "v", Binding: strings.Repeat("0a", 32), Expires: time.Now().Add(time.Minute).Unix()}
	for _, tc := range []struct {
		name    string
		binding string
		ok      bool
	}{
		{name: "the page's binding", binding: ok.Binding, ok: true},
		{name: "none", binding: ""},
		{name: "not hex", binding: strings.Repeat("zz", 32)},
		{name: "short", binding: ok.Binding[:62]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ok
			p.Binding = tc.binding
			sealed, err := f.seal(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.open(context.Background(), sealed)
			if tc.ok && (err != nil || got != p) {
				t.Fatalf("open = %+v, %v; want %+v", got, err, p)
			}
			if !tc.ok && !errors.Is(err, errNoSignIn) {
				t.Fatalf("open of a sign-in with binding %q = %+v, %v; want errNoSignIn", tc.binding, got, err)
			}
		})
	}
}
