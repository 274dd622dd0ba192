package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/testing/envoystandin"
)

// TestBodyChangedAfterTheDecisionMovesNoMoney (A2): a filter between
// ext_authz and ext_proc (a fault the stand-in injects; the shipped chain
// has none) turns the refund the gates approved, 1.00 USD, into 90.00 USD
// on its way out. ext_proc compares the body with the one decided and
// stops it: the agent gets a refusal, the rail's journal shows nothing on
// the payment, and the intent is not left in flight. The same refund
// through the unmodified chain is applied once.
func TestBodyChangedAfterTheDecisionMovesNoMoney(t *testing.T) {
	e := newRailEnv(t, envOptions{})
	e.payment("stripe", "pi_swap", 10000, "usd")
	cfg := e.proxyCfg
	cfg.RewriteBodyAfterAuthz = func(b []byte) []byte {
		return bytes.Replace(b, []byte("amount=100"), []byte("amount=9000"), 1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	swapper, err := envoystandin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer swapper.Close()

	r := e.stripeRefundVia("http://"+swapper.Addr(), nil, url.Values{"payment_intent": {"pi_swap"}, "amount": {"100"}})
	if r.Status != http.StatusForbidden || !strings.Contains(r.Body, "body_not_decided") {
		t.Fatalf("a body changed after the decision: %d %s; want 403 body_not_decided", r.Status, r.Body)
	}
	if n := e.journal().effectsOn("pi_swap"); n != 0 {
		t.Fatalf("%d refunds on pi_swap; the changed body must not reach the rail", n)
	}
	for _, it := range e.intentsOn("pi_swap") {
		if it.State == "IN_FLIGHT" || it.State == "APPLIED" {
			t.Fatalf("intent %s is %s after its request was stopped", it.SIK, it.State)
		}
	}
	if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_swap"}, "amount": {"100"}}); r.Status != http.StatusOK {
		t.Fatalf("the same refund through the shipped chain: %d %s", r.Status, r.Body)
	}
	if n := e.journal().effectsOn("pi_swap"); n != 1 {
		t.Fatalf("%d refunds on pi_swap after the honest request, want 1", n)
	}
}

// TestBodyNotSeenWholeMovesNoMoney: the gates decide only on a body they
// can show is whole. A body over ext_authz's bound (Envoy sends its first
// 64 KiB, flagged partial) and a chunked body with no declared length that
// fills the bound exactly (Envoy's flag says "false" then) are both
// refused, and the journal shows no refund.
func TestBodyNotSeenWholeMovesNoMoney(t *testing.T) {
	e := newRailEnv(t, envOptions{})
	e.payment("stripe", "pi_whole", 10000, "usd")
	bound := int(e.proxyCfg.MaxRequestBytes)
	form := "payment_intent=pi_whole&amount=100&metadata[note]="
	cases := []struct {
		name    string
		body    string
		chunked bool
	}{
		{"longer than the bound", form + strings.Repeat("x", bound), false},
		{"chunked, exactly the bound", form + strings.Repeat("x", bound-len(form)), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // no length known: Go sends it chunked
			}
			req, err := http.NewRequest(http.MethodPost, e.proxy+"/v1/refunds", body)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "stripe.local"
			req.Header.Set("Authorization", "Bearer "+e.secret)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "body_truncated") {
				t.Fatalf("%d %s; want 403 body_truncated", resp.StatusCode, b)
			}
		})
	}
	if n := e.journal().effectsOn("pi_whole"); n != 0 {
		t.Fatalf("%d refunds on pi_whole from bodies the gates did not see whole", n)
	}
}
