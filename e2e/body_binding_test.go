package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

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
	// Stopped before it left, the attempt is proven absent by the
	// reconciler (not rejected: a rejection would reopen under a new key).
	its := e.settle("pi_swap", 30*time.Second)
	if len(its) != 1 || its[0].State != "CONFIRMED_NOT_APPLIED" {
		t.Fatalf("after the stopped request: %+v; want one intent CONFIRMED_NOT_APPLIED", its)
	}
	if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_swap"}, "amount": {"100"}}); r.Status != http.StatusOK {
		t.Fatalf("the same refund through the shipped chain: %d %s", r.Status, r.Body)
	}
	if n := e.journal().effectsOn("pi_swap"); n != 1 {
		t.Fatalf("%d refunds on pi_swap after the honest request, want 1", n)
	}
	if after := e.intentsOn("pi_swap"); len(after) != 1 || after[0].State != "APPLIED" || after[0].StampGeneration != its[0].StampGeneration {
		t.Fatalf("after the honest retry: %+v; want APPLIED under the same stamp generation", after)
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
