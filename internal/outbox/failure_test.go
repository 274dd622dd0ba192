package outbox

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// TestFailureClasses: what the owner is told of a request that got no
// answer is a fixed class, whatever addresses, names or resolver the
// error itself names.
func TestFailureClasses(t *testing.T) {
	dial := func(err error) error {
		return &url.Error{Op: "Post", URL: "https://hooks.example.com/tok_secret", Err: &net.OpError{Op: "dial", Net: "tcp",
			Addr: &net.TCPAddr{IP: net.IPv4(10, 96, 7, 3), Port: 5432}, Err: err}}
	}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"refused address", dial(fmt.Errorf("%w: 10.96.7.3 is in the special-purpose range 10.0.0.0/8", ErrAddressRefused)), failRefused},
		{"no such host", &url.Error{Op: "Post", URL: "http://db.internal", Err: &net.OpError{Op: "dial", Err: &net.DNSError{
			Err: "no such host", Name: "db.internal", Server: "10.96.0.10:53", IsNotFound: true}}}, failDNS},
		{"timeout", &url.Error{Op: "Post", Err: context.DeadlineExceeded}, "no answer within 10s"},
		{"connection refused", dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), failConnRefused},
		{"unreachable", dial(os.NewSyscallError("connect", syscall.EHOSTUNREACH)), failUnreachable},
		{"reset", dial(os.NewSyscallError("read", syscall.ECONNRESET)), failReset},
		{"closed", &url.Error{Op: "Post", Err: io.EOF}, failReset},
		{"certificate names", &url.Error{Op: "Post", Err: &tlsVerifyError{x509.HostnameError{
			Certificate: &x509.Certificate{DNSNames: []string{"vault.internal.svc"}}, Host: "10.96.7.3"}}}, failTLS},
		{"headers", &url.Error{Op: "Post", Err: errors.New("net/http: server response headers exceeded 16384 bytes; aborted")}, failHeaders},
		{"other network error", dial(os.NewSyscallError("connect", syscall.EADDRNOTAVAIL)), failNetwork},
		{"malformed answer", &url.Error{Op: "Post", Err: errors.New(`malformed HTTP response "\x00\x00"`)}, failProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, detail := describe(tc.err, 10*time.Second)
			if got != tc.want {
				t.Fatalf("describe = %q, want %q (detail %q)", got, tc.want, detail)
			}
			for _, leak := range []string{"10.96", "internal", "tok_secret", "hooks.example.com"} {
				if strings.Contains(got, leak) {
					t.Fatalf("describe = %q: names %q", got, leak)
				}
			}
			if strings.Contains(detail, "tok_secret") { // the operator's log gets no URL either
				t.Fatalf("detail %q names the webhook URL", detail)
			}
		})
	}
}

// tlsVerifyError wraps an x509 error as crypto/tls does.
type tlsVerifyError struct{ err error }

func (e *tlsVerifyError) Error() string { return "tls: failed to verify certificate: " + e.err.Error() }
func (e *tlsVerifyError) Unwrap() error { return e.err }

// TestOwnerSeesNoAddressOfAFailedDelivery: the last error of a delivery
// that got no answer, which the owner reads, is a fixed class and names no
// address: a host name resolving to a refused address (found by a review:
// the error said what an internal name resolved to, an oracle into the
// operator's network), a closed port, a receiver whose certificate is not
// trusted, and one that closes the connection.
func TestOwnerSeesNoAddressOfAFailedDelivery(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	untrusted := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(untrusted.Close)
	hangup, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hungUp := make(chan struct{})
	go func() {
		defer close(hungUp)
		for {
			c, err := hangup.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 1024))
			c.Close()
		}
	}()
	t.Cleanup(func() { hangup.Close(); <-hungUp })
	port := closedURL[strings.LastIndex(closedURL, ":")+1:]

	cases := []struct {
		name   string
		url    string
		policy AddressPolicy
		want   string
	}{
		{"a name resolving to a refused address", "http://localhost:" + port + "/x", AddressPolicy{}, failRefused},
		{"connection refused", closedURL + "/x", loopback, failConnRefused},
		{"untrusted certificate", untrusted.URL + "/x", loopback, failTLS},
		{"connection closed", "http://" + hangup.Addr().String() + "/x", loopback, failReset},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := ledger.Open(ctx, pgtest.NewDatabase(t), ledger.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			ag, err := s.CreateAgent(ctx, "own_fail", "bot")
			if err != nil {
				t.Fatal(err)
			}
			w, err := s.CreateWebhook(ctx, "own_fail", ledger.WebhookSpec{URL: tc.url, Secret: testSecret})
			if err != nil {
				t.Fatal(err)
			}
			f := fixture{store: s, owner: "own_fail", agentID: ag.ID, webhook: w}
			k := f.applied(t, 1)
			d := &Dispatcher{Store: s, Owner: "dispatcher-1", Addresses: tc.policy}
			if delivered, failed, _, err := d.Pass(ctx); err != nil || delivered != 0 || failed != 1 {
				t.Fatalf("Pass = %d delivered, %d failed, %v", delivered, failed, err)
			}
			evs, _ := s.EventsOf(ctx, k)
			st, err := s.GetDelivery(ctx, f.owner, evs[0].ID, w.ID)
			if err != nil || st.LastStatus != 0 || st.LastError != tc.want {
				t.Fatalf("delivery = %+v, %v; want last error %q", st, err, tc.want)
			}
		})
	}
}
