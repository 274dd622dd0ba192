package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/countersign/countersign/internal/config"
)

// TestReadsNeedAMandateOnTheAccount: a read through Envoy leaves with the
// account's secret key, and its answer shows the account's entities. Only
// an agent with a mandate in force on the account reads there: another
// owner's agent (a valid credential, no grant, no mandate) and an agent
// whose mandate was revoked are refused before anything reaches the rail
// (found by a review: any authenticated agent of any owner read every
// account's refunds, their metadata and body stamps, under its key). A
// read spends the agent's rail reads on the account.
func TestReadsNeedAMandateOnTheAccount(t *testing.T) {
	h := railHarness(t, harnessOption{cfg: func(c *config.Config) { c.AgentRailReadRate, c.AgentRailReadBurst = 0.001, 4 }})
	base := egress(t, h)
	ctx := context.Background()
	if a := refundVia(t, base, h.secret, "payment_intent=pi_bench&amount=1000&metadata[note]=A-private-note"); a.status != http.StatusOK {
		t.Fatalf("the owner's agent's refund = %d %s", a.status, a.body)
	}
	get := func(secret, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Host = "api.stripe.com"
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	const listing = "/v1/refunds?payment_intent=pi_bench&limit=100"
	reads := func() int { return railGets(h.mock) }

	// The agent with the mandate reads (this took one of its four reads;
	// the refund's resolve took another).
	if s, body := get(h.secret, listing); s != http.StatusOK || !strings.Contains(body, "A-private-note") {
		t.Fatalf("the mandated agent's read = %d %.200s", s, body)
	}

	stranger := newSecondOwner(t, h)
	before := reads()
	for _, p := range []string{listing, "/v1/payment_intents/pi_bench", "/v1/balance"} {
		s, body := get(stranger.secret, p)
		if s != http.StatusForbidden || !strings.Contains(body, "mandate_missing") || strings.Contains(body, "A-private-note") {
			t.Fatalf("another owner's agent GET %s = %d %.300s, want 403 mandate_missing", p, s, body)
		}
	}
	if n := reads() - before; n != 0 {
		t.Fatalf("another owner's agent's reads reached the rail %d times", n)
	}

	// Reads spend the agent's rail reads: two are left of its four.
	for i := range 2 {
		if s, body := get(h.secret, "/v1/payment_intents/pi_bench"); s != http.StatusOK {
			t.Fatalf("read %d = %d %.200s", i, s, body)
		}
	}
	before = reads()
	if s, body := get(h.secret, "/v1/payment_intents/pi_bench"); s != http.StatusTooManyRequests || !strings.Contains(body, "rail_reads_limited") {
		t.Fatalf("a read past the agent's rail reads = %d %.200s, want 429 rail_reads_limited", s, body)
	}
	if n := reads() - before; n != 0 {
		t.Fatalf("a read past the agent's bucket reached the rail")
	}

	// Its mandate revoked, the agent reads no more.
	mandates, err := h.store.ListMandates(ctx, h.ownerID, h.agentID)
	if err != nil || len(mandates) == 0 {
		t.Fatalf("mandates = %v, %v", mandates, err)
	}
	for _, m := range mandates {
		if _, err := h.store.RevokeMandate(ctx, m.Hash, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if s, body := get(h.secret, listing); s != http.StatusForbidden || !strings.Contains(body, "mandate_revoked") {
		t.Fatalf("a read after the mandate's revocation = %d %.300s, want 403 mandate_revoked", s, body)
	}
}

// TestAllowedActionAsksForAnUncompressedAnswer: ext_proc reads the rail's
// answer to commit the attempt (its entity, its fee), so an ALLOW of a
// money-moving request overwrites the agent's Accept-Encoding with
// identity: an agent asking for gzip (Go's SDKs do by default) would have
// every answer read as ambiguous and its fee go uncounted (found by a
// review).
func TestAllowedActionAsksForAnUncompressedAnswer(t *testing.T) {
	h := railHarness(t)
	resp := h.checkRefund(t, h.secret, "gzip-1", 100)
	ok := resp.GetOkResponse()
	if ok == nil {
		t.Fatalf("refund denied: %v", resp.GetDeniedResponse().GetBody())
	}
	found := false
	for _, hv := range ok.GetHeaders() {
		if hv.GetHeader().GetKey() == "accept-encoding" {
			found = hv.GetHeader().GetValue() == "identity" && hv.GetAppendAction() == corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		}
	}
	if !found {
		t.Fatalf("the ALLOW does not overwrite accept-encoding with identity: %v", ok.GetHeaders())
	}
}
