package outbox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
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
		{"::127.0.0.1", AddressPolicy{}, false}, // IPv4-compatible
		{"::10.0.0.1", AddressPolicy{}, false},
		{"::8.8.8.8", AddressPolicy{}, false},
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
		{"http://localhost.:8080/x", "127.0.0.1"}, // fully qualified
		{"http://LOCALHOST./x", "127.0.0.1"},
		{"http://admin.localhost./x", "127.0.0.1"},
		{"http://[::127.0.0.1]/x", "::/96"},
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
	if err != nil || st.State != "pending" || st.LastError != failRefused {
		t.Fatalf("delivery = %+v, %v; want last error %q", st, err, failRefused)
	}
}

// TestReceiverCannotMakeTheDispatcherBufferItsAnswer: a receiver answering
// 200 with headers beyond MaxResponseHeaderBytes, over HTTP/1.1 or HTTP/2,
// has its answer refused (a failed attempt) instead of buffered; the
// dispatcher asks for no compressed answer. Found by a review: net/http's
// 10 MiB default let each delivery in flight hold a receiver's 9 MiB of
// headers (~250 MiB for one batch).
func TestReceiverCannotMakeTheDispatcherBufferItsAnswer(t *testing.T) {
	cases := []struct {
		name   string
		h2     bool
		fields int // of 1 MiB in all
	}{
		{"HTTP/1.1, one field", false, 1},
		{"HTTP/1.1, many fields", false, 128},
		{"HTTP/2, one field", true, 1},
		{"HTTP/2, many fields", true, 128},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var protos, encodings []string
			value := strings.Repeat("a", (1<<20)/tc.fields)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				protos, encodings = append(protos, r.Proto), append(encodings, r.Header.Get("Accept-Encoding"))
				mu.Unlock()
				for i := range tc.fields {
					w.Header().Set("X-Big-"+strconv.Itoa(i), value)
				}
				w.WriteHeader(200)
			}))
			client := loopback.Client()
			t.Cleanup(client.CloseIdleConnections)
			if tc.h2 {
				srv.EnableHTTP2 = true
				srv.StartTLS()
				roots := x509.NewCertPool()
				roots.AddCert(srv.Certificate())
				client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
			f := newFixture(t, &receiver{srv: srv})
			k := f.applied(t, 1)
			d := &Dispatcher{Store: f.store, Owner: "dispatcher-1", HTTP: client}
			delivered, failed, _, err := d.Pass(context.Background())
			if err != nil || delivered != 0 || failed != 1 {
				t.Fatalf("Pass = %d delivered, %d failed, %v; want the answer refused", delivered, failed, err)
			}
			mu.Lock()
			defer mu.Unlock()
			want := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[tc.h2]
			if len(protos) != 1 || protos[0] != want || encodings[0] != "" {
				t.Fatalf("receiver got %v with Accept-Encoding %q; want one %s request asking for no compression", protos, encodings, want)
			}
			evs, _ := f.store.EventsOf(context.Background(), k)
			st, err := f.store.GetDelivery(context.Background(), f.owner, evs[0].ID, f.webhook.ID)
			// Over HTTP/2, headers far beyond the limit end the connection
			// before their size is known.
			if err != nil || st.State != "pending" || st.LastStatus != 0 ||
				(st.LastError != failHeaders && (!tc.h2 || st.LastError != failProtocol)) {
				t.Fatalf("delivery = %+v, %v; want last error %q", st, err, failHeaders)
			}
		})
	}
}

// TestHugeResponseHeadersAllocateLittle: 9 MiB of headers answered over a
// raw connection (so that what is measured is the dispatcher's) make one
// delivery allocate far less than the headers.
func TestHugeResponseHeadersAllocateLittle(t *testing.T) {
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Big: " + strings.Repeat("a", 9<<20) + "\r\n\r\n")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		_, _ = c.Read(buf)
		_, _ = c.Write(resp)
	}()
	t.Cleanup(func() { l.Close(); <-served })
	f := newFixture(t, &receiver{srv: &httptest.Server{URL: "http://" + l.Addr().String()}})
	f.applied(t, 1)
	d := &Dispatcher{Store: f.store, Owner: "dispatcher-1", Addresses: loopback}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	delivered, failed, _, err := d.Pass(context.Background())
	runtime.ReadMemStats(&m1)
	if err != nil || delivered != 0 || failed != 1 {
		t.Fatalf("Pass = %d delivered, %d failed, %v; want the answer refused", delivered, failed, err)
	}
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 4<<20 {
		t.Fatalf("one delivery allocated %d MiB reading a receiver's 9 MiB of headers", alloc>>20)
	}
}
