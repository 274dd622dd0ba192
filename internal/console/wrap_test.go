package console_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/ownerauth"
)

// TestWrapAPI: what of a request reaches the gateway, and when nothing
// does; and that every answer carries the console's security headers and
// Cache-Control: no-store.
func TestWrapAPI(t *testing.T) {
	r := newRig(t, rigOptions{})
	se, body := r.signIn(r.token)
	other, _ := r.signIn(r.token)
	csrf := body["csrf_token"].(string)
	secret := se.whole()
	ck := cookie(se.cookie) + "; other=1"
	// with is the cookie and the key half, as the console page sends them,
	// then more.
	with := func(more ...string) []string {
		return append([]string{"Cookie", ck, console.SessionKeyHeader, se.key}, more...)
	}
	for _, tc := range []struct {
		name      string
		method    string
		headers   []string
		reaches   bool
		wantAuthz string
	}{
		{"GET with the cookie and the key", "GET", with(), true, "Bearer " + secret},
		{"GET cross-site with the cookie and the key", "GET", with("Sec-Fetch-Site", "cross-site"), true, "Bearer " + secret},
		// The cookie half alone (what a page of another port of the host
		// is sent) is no session: the request goes on with no credential.
		{"GET with the cookie alone", "GET", []string{"Cookie", ck}, true, ""},
		{"POST with the cookie alone and the CSRF token", "POST", []string{"Cookie", ck, console.CSRFHeader, csrf}, true, ""},
		{"GET with the key alone", "GET", []string{console.SessionKeyHeader, se.key}, true, ""},
		{"GET with two key headers", "GET", []string{"Cookie", ck, console.SessionKeyHeader, se.key, console.SessionKeyHeader, se.key}, true, ""},
		{"GET with a key in another case", "GET", []string{"Cookie", ck, console.SessionKeyHeader, strings.ToUpper(se.key)}, true, ""},
		{"GET with the cookie as the key", "GET", []string{"Cookie", ck, console.SessionKeyHeader, se.cookie}, true, ""},
		// Another session's key half: joined, and the API refuses the whole.
		{"GET with another session's key", "GET", []string{"Cookie", ck, console.SessionKeyHeader, other.key}, true, "Bearer " + se.cookie + "." + other.key},
		{"POST without CSRF", "POST", with(), false, ""},
		{"POST with a wrong CSRF token", "POST", with(console.CSRFHeader, csrf[:len(csrf)-1]+"x"), false, ""},
		{"POST with two CSRF headers", "POST", with(console.CSRFHeader, csrf, console.CSRFHeader, csrf), false, ""},
		{"POST with CSRF from another origin", "POST", with(console.CSRFHeader, csrf, "Origin", "https://evil.example"), false, ""},
		{"POST with CSRF, cross-site", "POST", with(console.CSRFHeader, csrf, "Sec-Fetch-Site", "cross-site"), false, ""},
		{"DELETE without CSRF", "DELETE", with(), false, ""},
		{"PATCH without CSRF", "PATCH", with(), false, ""},
		{"POST with CSRF", "POST", with(console.CSRFHeader, csrf), true, "Bearer " + secret},
		{"POST with CSRF, same origin", "POST", with(console.CSRFHeader, csrf, "Origin", r.srv.URL, "Sec-Fetch-Site", "same-origin"), true, "Bearer " + secret},
		{"owner token, no cookie", "POST", []string{"Authorization", "Bearer " + r.token}, true, "Bearer " + r.token},
		{"owner token wins over the cookie", "POST", with("Authorization", "Bearer "+r.token), true, "Bearer " + r.token},
		{"no credential", "GET", nil, true, ""},
		{"two session cookies", "GET", []string{"Cookie", ck + "; " + cookie(se.cookie), console.SessionKeyHeader, se.key}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := r.reachedCount()
			x := r.do(tc.method, "/v1/agents", "", tc.headers...)
			// Owner data served to a browser: never cached, framed or
			// sniffed, whatever the answer and whoever asked.
			checkSecurityHeaders(t, tc.name, x.header)
			if v := x.header.Values("Cache-Control"); len(v) != 1 || v[0] != "no-store" {
				t.Errorf("Cache-Control = %q, want no-store", v)
			}
			if !tc.reaches {
				if x.status != 403 || strings.TrimSpace(x.body) != `{"error":"csrf"}` || r.reachedCount() != before {
					t.Fatalf("= %d %s, reached %d; want 403 csrf and nothing reaching the gateway", x.status, x.body, r.reachedCount()-before)
				}
				return
			}
			if x.status != 200 || r.reachedCount() != before+1 {
				t.Fatalf("= %d %s, want it to reach the gateway", x.status, x.body)
			}
			got := r.lastReached()
			if v := got.Header.Values("Authorization"); strings.Join(v, ",") != tc.wantAuthz {
				t.Errorf("Authorization at the gateway = %q, want %q", v, tc.wantAuthz)
			}
			if v := got.Header.Values("Cookie"); len(v) != 0 {
				t.Errorf("the Cookie header reached the gateway: %q", v)
			}
			if v := got.Header.Values(console.CSRFHeader); len(v) != 0 {
				t.Errorf("the CSRF header reached the gateway: %q", v)
			}
			if v := got.Header.Values(console.SessionKeyHeader); len(v) != 0 {
				t.Errorf("the session key header reached the gateway: %q", v)
			}
		})
	}
}

// streamingAPI stands in for the gateway's intents:watch: one line at once
// and then one per tick, flushed, until the request's context ends.
func streamingAPI(t *testing.T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "application/json")
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(w, "{\"result\":{\"n\":%d}}\n", i)
			if err := rc.Flush(); err != nil {
				t.Errorf("flush through the wrapper: %v", err)
				return
			}
			select {
			case <-req.Context().Done():
				return
			case <-tick.C:
			}
		}
	})
}

// TestStreamEndsWithItsSession: a watch through the wrapper streams
// (flushing passes through) and ends when its session expires, and, within
// the recheck interval, when it is signed out.
func TestStreamEndsWithItsSession(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(r *rig, sessionID string)
	}{
		{"expiry", func(*rig, string) {}},
		{"sign-out", func(r *rig, id string) {
			if err := r.store.RevokeOwnerSession(context.Background(), id); err != nil {
				t.Error(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOptions{api: streamingAPI(t), console: func(o *console.Options) { o.Recheck = 50 * time.Millisecond }})
			owner, _, err := r.auth.SignInToken(context.Background(), r.token)
			if err != nil {
				t.Fatal(err)
			}
			life := time.Hour
			if tc.name == "expiry" {
				life = 1500 * time.Millisecond
			}
			secret, row, err := ownerauth.StartSession(context.Background(), r.store, owner, r.clock.Now().Add(life))
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest("GET", r.srv.URL+"/v1/intents:watch", nil)
			req.Header.Set("Cookie", cookie(secret.Cookie))
			req.Header.Set(console.SessionKeyHeader, secret.Key)
			started := time.Now()
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			lines := readLines(res.Body)
			for range 3 { // streaming, not buffered until the end
				select {
				case l, ok := <-lines:
					if !ok || !strings.Contains(l, `"result"`) {
						t.Fatalf("stream line %q (open %v)", l, ok)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("no line streamed within 5s")
				}
			}
			tc.end(r, row.ID)
			deadline := time.After(10 * time.Second)
			for {
				select {
				case _, ok := <-lines:
					if ok {
						continue
					}
				case <-deadline:
					t.Fatal("the stream outlived its session by 10s")
				}
				break
			}
			if tc.name == "expiry" && time.Since(started) < life-100*time.Millisecond {
				t.Errorf("the stream ended after %s, before its session's %s", time.Since(started), life)
			}
		})
	}
}
