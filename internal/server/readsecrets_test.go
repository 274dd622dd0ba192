package server

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"

	"github.com/countersign/countersign/internal/testing/envoystandin"
)

// TestReadsNeverHandOutClientSecrets (a reviewer's probe, made a test): an
// agent's GET through Envoy leaves with the account's secret key, and a
// Stripe PaymentIntent in its answer carries client_secret, which with
// the account's publishable key confirms the PaymentIntent (charges the
// customer) with no Countersign in the way. A read that would embed one
// (expand, on a charge, a refund, a refund list) is refused at ext_authz,
// naming the member; the PaymentIntent read by its own path reaches the
// agent without it (ext_proc), and an answer ext_proc cannot read for it
// is withheld.
func TestReadsNeverHandOutClientSecrets(t *testing.T) {
	h := railHarness(t, unlimitedAgent)
	for _, path := range []string{
		"/v1/payment_intents/pi_bench?expand[]=latest_charge",
		"/v1/charges/ch_bench?expand[]=payment_intent",
		"/v1/refunds?expand[]=data.payment_intent&limit=100",
		"/v1/refunds/re_bench?expand[]=payment_intent",
		"/v1/refunds?limit=100&expand%5B%5D=data.payment_intent",
	} {
		resp, err := h.client.Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			ContextExtensions: map[string]string{"rail_account": "acct_bench"},
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Id: "probe-" + path, Method: "GET", Host: "stripe.local", Path: path,
				Headers: map[string]string{"authorization": "Bearer " + h.secret},
			}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if codes.Code(resp.GetStatus().GetCode()) == codes.OK {
			t.Errorf("GET %s allowed: its answer (a PaymentIntent with client_secret) would go back to the agent", path)
			continue
		}
		if body := resp.GetDeniedResponse().GetBody(); !strings.Contains(body, "expand") || !strings.Contains(body, "client_secret") {
			t.Errorf("GET %s refused with %s: want the refusal to name expand and why", path, body)
		}
	}

	// The rail: a PaymentIntent awaiting confirmation, uncompressed when
	// asked for identity, gzip otherwise (as a server may).
	const pi = `{"id":"pi_bench","object":"payment_intent","amount":2500,"client_secret":"pi_bench_secret_XYZ","status":"requires_confirmation"}`
	var mu sync.Mutex
	var asked []string
	rail := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Accept-Encoding") != "identity" || r.URL.Path == "/v1/payment_intents/pi_gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			_, _ = gz.Write([]byte(pi))
			_ = gz.Close()
			return
		}
		_, _ = io.WriteString(w, pi)
	}))
	t.Cleanup(rail.Close)
	p, err := envoystandin.Start(context.Background(), envoystandin.Config{
		ExtAuthz: h.envoyAddr, ExtProc: h.envoyAddr, MaxRequestBytes: 64 << 10, AllowPartialMessage: true,
		Timeout: 30 * time.Second, ExtProcMessageTimeout: 30 * time.Second,
		Routes: []envoystandin.Route{{Prefix: "*", Upstream: rail.URL, HostRewrite: "api.stripe.com",
			ContextExtensions: map[string]string{"rail_account": "acct_bench"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	get := func(path string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+p.Addr()+path, nil)
		req.Host = "api.stripe.com"
		req.Header.Set("Authorization", "Bearer "+h.secret)
		// What Go's transport asks for by itself (Stripe's Go SDK).
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(body)
	}

	s, hd, body := get("/v1/payment_intents/pi_bench")
	if s != http.StatusOK || hd.Get("Content-Encoding") != "" || !strings.Contains(body, `"id":"pi_bench"`) || !strings.Contains(body, `"status":"requires_confirmation"`) {
		t.Fatalf("GET /v1/payment_intents/pi_bench = %d %v %q: want the PaymentIntent, uncompressed", s, hd, body)
	}
	if strings.Contains(body, "client_secret") || strings.Contains(body, "secret_XYZ") {
		t.Fatalf("the agent received the client_secret: %s", body)
	}
	mu.Lock()
	if len(asked) != 1 || asked[0] != "identity" {
		t.Errorf("the rail was asked with Accept-Encoding %q, want identity once", asked)
	}
	mu.Unlock()

	// An answer that comes compressed all the same is withheld.
	s, _, body = get("/v1/payment_intents/pi_gzip")
	if s != http.StatusBadGateway || !strings.Contains(body, "countersign_read_withheld") || strings.Contains(body, "secret_XYZ") {
		t.Fatalf("a gzip answer to a read = %d %q, want 502 countersign_read_withheld", s, body)
	}
}
