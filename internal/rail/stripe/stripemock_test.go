package stripe

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
)

// stripeMock returns the URL of a stripe-mock (github.com/stripe/stripe-mock,
// which answers from Stripe's OpenAPI spec and rejects requests the spec
// does not allow): STRIPE_MOCK_URL if set, else the version pinned as a
// tool in go.mod (`go tool stripe-mock`), started for this test.
func stripeMock(t *testing.T) string {
	t.Helper()
	if u := os.Getenv("STRIPE_MOCK_URL"); u != "" {
		return strings.TrimRight(u, "/")
	}
	// `go tool -n` builds the pinned tool (once; it is cached) and prints
	// its path.
	out, err := exec.Command("go", "tool", "-n", "stripe-mock").Output()
	if err != nil {
		t.Fatalf("building the pinned stripe-mock (go tool -n stripe-mock): %v", err)
	}
	bin := strings.TrimSpace(string(out))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin, "-http-port", fmt.Sprint(port))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url + "/v1/balance")
		if err == nil {
			_ = resp.Body.Close()
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock did not start: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStripeMock proves against Stripe's own OpenAPI spec that stamped
// requests, the reads Resolve makes and the lists Find pages are valid
// Stripe requests, and that Classify reads Stripe-shaped answers.
func TestStripeMock(t *testing.T) {
	base := stripeMock(t)
	hc := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	c := railtest.NewClient(base, "Bearer sk_test_123", hc)
	ad := New()
	ctx := context.Background()
	for _, tc := range parseCases {
		t.Run("stamped/"+tc.Name, func(t *testing.T) {
			p, err := ad.Parse(tc.Req)
			if err != nil {
				t.Fatal(err)
			}
			st, err := ad.Stamp(p.Action, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 7)
			if err != nil {
				t.Fatal(err)
			}
			req := tc.Req
			req.Headers = map[string]string{}
			if req, err = withBodyStamp(req, st.BodyValue); err != nil {
				t.Fatal(err)
			}
			headers := map[string]string{"Content-Type": req.Headers["content-type"]}
			for k, v := range st.Headers {
				headers[k] = v
			}
			resp, err := c.Do(ctx, http.MethodPost, req.Path, headers, req.Body)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("stripe-mock refused the stamped request %s: %d %s", req.Body, resp.StatusCode, body)
			}
			cl := ad.Classify(p.Action, rail.Response{Status: resp.StatusCode, Body: body})
			if cl.Outcome != rail.Applied || cl.EntityID == "" {
				t.Fatalf("Classify = %+v for %s", cl, body)
			}
		})
	}
	since := time.Unix(1_700_000_000, 0)
	for _, a := range []rail.Action{refundPI, refundCh, payout, transfer} {
		t.Run("find/"+string(a.Kind)+"/"+a.Subject, func(t *testing.T) {
			f, err := ad.Find(ctx, c, a, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", since)
			if err != nil || f.Match != nil || !f.Exhausted || f.Pages != listings(a) {
				t.Fatalf("Find = %+v, %v", f, err)
			}
		})
	}
	for _, a := range []rail.Action{refundPI, refundCh} {
		t.Run("resolve/"+a.Subject, func(t *testing.T) {
			ref, err := ad.Resolve(ctx, c, a)
			if err != nil || ref.Subject == "" || ref.Currency != "USD" {
				t.Fatalf("Resolve = %+v, %v", ref, err)
			}
		})
	}
}
