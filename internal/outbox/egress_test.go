package outbox

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestAddressPolicyRefusesSpecialPurposeRanges(t *testing.T) {
	internal := AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}}
	for _, tc := range []struct {
		addr   string
		policy AddressPolicy
		ok     bool
	}{
		{"8.8.8.8", AddressPolicy{}, true},
		{"2606:4700::1111", AddressPolicy{}, true},
		{"127.0.0.1", AddressPolicy{}, false},
		{"127.9.9.9", AddressPolicy{}, false},
		{"10.1.2.3", AddressPolicy{}, false},
		{"172.16.0.1", AddressPolicy{}, false},
		{"192.168.1.1", AddressPolicy{}, false},
		{"169.254.169.254", AddressPolicy{}, false}, // cloud metadata
		{"100.64.0.1", AddressPolicy{}, false},
		{"0.0.0.0", AddressPolicy{}, false},
		{"224.0.0.1", AddressPolicy{}, false},
		{"255.255.255.255", AddressPolicy{}, false},
		{"::1", AddressPolicy{}, false},
		{"::", AddressPolicy{}, false},
		{"fe80::1", AddressPolicy{}, false},
		{"fd00::1", AddressPolicy{}, false},
		{"::ffff:10.0.0.1", AddressPolicy{}, false}, // IPv4-mapped
		{"::ffff:127.0.0.1", AddressPolicy{}, false},
		{"10.20.1.1", internal, true},
		{"::ffff:10.20.1.1", internal, true},
		{"10.21.0.1", internal, false},
		{"127.0.0.1", internal, false},
	} {
		err := tc.policy.Check(netip.MustParseAddr(tc.addr))
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrAddressRefused)) {
			t.Errorf("Check(%s) with %v = %v, want ok=%v", tc.addr, tc.policy.Allow, err, tc.ok)
		}
	}
}

func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		url, want string // want "" = accepted
	}{
		{"https://hooks.example.com/countersign", ""},
		{"http://hooks.example.com:8443/x", ""},
		{"ftp://hooks.example.com/x", `scheme "ftp"`},
		{"https://user:pw@hooks.example.com/x", "credentials"},
		{"https:///x", "no host"},
		{"http://localhost:8080/x", "127.0.0.1"},
		{"http://admin.localhost/x", "127.0.0.1"},
		{"http://169.254.169.254/latest/meta-data", "169.254.0.0/16"},
		{"http://[::1]:9191/", "::1"},
		{"http://10.0.0.5/hook", "10.0.0.0/8"},
	} {
		err := AddressPolicy{}.CheckURL(tc.url)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckURL(%s) = %v, want accepted", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckURL(%s) = %v, want an error naming %q", tc.url, err, tc.want)
		}
	}
}

// TestClientChecksTheResolvedAddress: the check runs on the address a
// connection goes to, after name resolution, so a host name pointing at
// loopback is refused as its address would be.
func TestClientChecksTheResolvedAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	defer srv.Close()
	byName := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	for _, u := range []string{srv.URL, byName} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, u, nil)
		resp, err := AddressPolicy{}.Client().Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("POST %s reached the loopback receiver (%d)", u, resp.StatusCode)
		}
		if !errors.Is(err, ErrAddressRefused) {
			t.Fatalf("POST %s: %v, want ErrAddressRefused", u, err)
		}
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, nil)
	resp, err := loopback.Client().Do(req)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("allowed loopback: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestDeliveryToARefusedAddressFails: a webhook that points at an internal
// address is never called; the attempt fails with the reason recorded.
func TestDeliveryToARefusedAddressFails(t *testing.T) {
	rc := newReceiver(t, always(204))
	f := newFixture(t, rc)
	k := f.applied(t, 1)
	d := &Dispatcher{Store: f.store, Owner: "dispatcher-1"} // the default policy
	delivered, failed, _, err := d.Pass(context.Background())
	if err != nil || delivered != 0 || failed != 1 {
		t.Fatalf("Pass = %d delivered, %d failed, %v", delivered, failed, err)
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("the loopback receiver got %d requests", n)
	}
	evs, err := f.store.EventsOf(context.Background(), k)
	if err != nil || len(evs) != 1 {
		t.Fatalf("events = %+v, %v", evs, err)
	}
	st, err := f.store.GetDelivery(context.Background(), f.owner, evs[0].ID, f.webhook.ID)
	if err != nil || st.State != "pending" || !strings.Contains(st.LastError, "special-purpose range 127.0.0.0/8") {
		t.Fatalf("delivery = %+v, %v", st, err)
	}
}
