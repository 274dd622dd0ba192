package server

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/engine"
)

// recorded counts the decision records of the requests ids.
func (h *allowHarness) recorded(t *testing.T, ids []string) (n int, reasons map[string]int) {
	t.Helper()
	reasons = map[string]int{}
	for _, id := range ids {
		ds, err := h.store.DecisionsByRequest(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			reasons[d.ReasonCode]++
		}
		n += len(ds)
	}
	return n, reasons
}

// decisionsCounted is countersign_decisions_total for reason, summed over
// sources and verdicts.
func (h *allowHarness) decisionsCounted(t *testing.T, reason string) float64 {
	t.Helper()
	var n float64
	for _, m := range scrape(t, h.httpAddr)["countersign_decisions_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "reason_code" && l.GetValue() == reason {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// throttledBound is the most refusals past a limit that may be recorded for
// one agent or source over elapsed: one at once, then one a second.
func throttledBound(elapsed time.Duration) int { return 1 + int(math.Ceil(elapsed.Seconds())) }

// TestDecisionsAreLimitedPerAgent: an agent that has asked for its burst of
// decisions is refused before anything else is decided (no rail read, no
// intent), through Envoy as a 429 with Retry-After and through the native
// Decide RPC alike; of a flood of such refusals at most one a second is
// recorded, every one is counted; another agent of the same owner is not
// held back, and a revoked agent's flood writes no more rows than a live
// one's.
func TestDecisionsAreLimitedPerAgent(t *testing.T) {
	// 3 at once, then one each 1000 s: no refill during the test.
	h := railHarness(t, harnessOption{cfg: func(c *config.Config) {
		c.AgentDecisionRate, c.AgentDecisionBurst = 0.001, 3
		c.AgentRailReadRate = 0
	}})
	for i := range 3 {
		if resp := h.checkRefund(t, h.secret, fmt.Sprintf("dl-%d", i), 100+i); codes.Code(resp.GetStatus().GetCode()) != codes.OK {
			t.Fatalf("refund %d within the burst: %v", i, resp.GetStatus())
		}
	}
	reads, before := railGets(h.mock), h.decisionsCounted(t, engine.ReasonDecisionsLimited)

	start := time.Now()
	resp := h.checkRefund(t, h.secret, "dl-over", 200)
	status, code := deniedCode(t, resp)
	if status != http.StatusTooManyRequests || code != engine.ReasonDecisionsLimited {
		t.Fatalf("refund past the burst through Envoy = %d %s; want 429 %s", status, code, engine.ReasonDecisionsLimited)
	}
	headers := map[string]string{}
	for _, hv := range resp.GetDeniedResponse().GetHeaders() {
		headers[hv.GetHeader().GetKey()] = hv.GetHeader().GetValue()
	}
	if headers["retry-after"] != "1000" || headers["x-countersign-reason"] != engine.ReasonDecisionsLimited {
		t.Fatalf("denied headers %v: want retry-after 1000 and the reason", headers)
	}
	if n, reasons := h.recorded(t, []string{"dl-over"}); n != 1 || reasons[engine.ReasonDecisionsLimited] != 1 {
		t.Fatalf("records of the first refusal past the limit = %v; want it recorded", reasons)
	}

	// A flood past the limit: every request refused and counted, at
	// most one a second recorded.
	const flood = 60
	ids := make([]string, flood)
	var wg sync.WaitGroup
	for i := range flood {
		ids[i] = fmt.Sprintf("dl-flood-%d", i)
		wg.Go(func() {
			if status, code := deniedCode(t, h.checkRefund(t, h.secret, ids[i], 300+i)); status != http.StatusTooManyRequests || code != engine.ReasonDecisionsLimited {
				t.Errorf("flood request %d = %d %s; want 429 %s", i, status, code, engine.ReasonDecisionsLimited)
			}
		})
	}
	wg.Wait()
	// The native API: the same refusal, as a verdict.
	d := h.decide(t, refund("pi_bench", 900, ""))
	if d.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || d.GetReasonCode() != engine.ReasonDecisionsLimited ||
		d.GetRefusal().GetHttpStatus() != http.StatusTooManyRequests || d.GetRefusal().GetHeaders()["retry-after"] != "1000" {
		t.Fatalf("native Decide past the burst = %s %s, refusal %d %v", d.GetVerdict(), d.GetReasonCode(), d.GetRefusal().GetHttpStatus(), d.GetRefusal().GetHeaders())
	}
	elapsed := time.Since(start)
	if n, _ := h.recorded(t, ids); n > throttledBound(elapsed)-1 {
		t.Fatalf("%d of %d refusals past the limit recorded in %s (the first was recorded before); want at most %d", n, flood, elapsed, throttledBound(elapsed)-1)
	}
	if got := h.decisionsCounted(t, engine.ReasonDecisionsLimited) - before; got != flood+2 {
		t.Fatalf("countersign_decisions_total{reason_code=%q} grew by %v; want %d, every refusal", engine.ReasonDecisionsLimited, got, flood+2)
	}
	if n := railGets(h.mock); n != reads {
		t.Fatalf("%d rail reads after the refusals, %d before: a refused request read the rail", n, reads)
	}

	// Another agent of the same owner is not held back.
	secret, agentID := newAgentCredential(t, h.store, h.ownerID, "second agent")
	grantAll(t, h.store, agentID, "acct_bench")
	if resp := h.checkRefund(t, secret, "dl-other", 400); codes.Code(resp.GetStatus().GetCode()) != codes.OK {
		t.Fatalf("another agent's refund: %v", resp.GetStatus())
	}

	// A revoked agent that floods: refused as revoked within its burst,
	// then past its limit, its records bounded the same way.
	revokedSecret, revokedID := newAgentCredential(t, h.store, h.ownerID, "revoked agent")
	if err := h.store.RevokeAgent(context.Background(), revokedID); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	revokedIDs := make([]string, flood)
	for i := range flood {
		revokedIDs[i] = fmt.Sprintf("dl-revoked-%d", i)
		h.checkRefund(t, revokedSecret, revokedIDs[i], 100)
	}
	elapsed = time.Since(start)
	n, reasons := h.recorded(t, revokedIDs)
	if reasons[engine.ReasonAgentRevoked] != 3 || n > 3+throttledBound(elapsed) {
		t.Fatalf("a revoked agent's %d requests in %s wrote %d records %v; want 3 %s and at most %d past the limit",
			flood, elapsed, n, reasons, engine.ReasonAgentRevoked, throttledBound(elapsed))
	}
}

// TestTooManyFailuresAreRecordedThrottled: a source that keeps presenting
// unknown credentials is refused before any lookup once it has failed too
// often; those refusals are recorded at most one a second, so guessing
// writes a bounded number of rows.
func TestTooManyFailuresAreRecordedThrottled(t *testing.T) {
	h := railHarness(t)
	const n = 80
	ids := make([]string, n)
	start := time.Now()
	for i := range n {
		ids[i] = fmt.Sprintf("guess-%d", i)
		h.checkRefund(t, fmt.Sprintf("csk_guess%030d", i), ids[i], 100)
	}
	elapsed := time.Since(start)
	total, reasons := h.recorded(t, ids)
	limited := reasons[engine.ReasonTooManyFailures]
	if limited == 0 || limited > throttledBound(elapsed) {
		t.Fatalf("%d guesses in %s: records %v; want the refusals for too many failures recorded, at most %d", n, elapsed, reasons, throttledBound(elapsed))
	}
	if total > config.Defaults().AuthFailureBurst+1+throttledBound(elapsed) {
		t.Fatalf("%d guesses wrote %d records %v", n, total, reasons)
	}
}

// TestARevokedCredentialSpendsNotItsAgentsDecisions: requests with the
// credentials of an agent that the owner revoked share a bucket of their
// own (not one each); however many are sent, the agent's live credential
// is still decided. Before, they
// took the agent's decisions: whoever held a leaked, revoked credential
// kept the agent's payments refused (a review: 48 of 48).
func TestARevokedCredentialSpendsNotItsAgentsDecisions(t *testing.T) {
	h := railHarness(t, harnessOption{cfg: func(c *config.Config) {
		c.AgentDecisionRate, c.AgentDecisionBurst = 0.001, 3
		c.AgentRailReadRate = 0
	}})
	ctx := context.Background()
	issue := func() (string, string) {
		secret, hash, err := credential.Generate()
		if err != nil {
			t.Fatal(err)
		}
		c, err := h.store.IssueCredential(ctx, h.agentID, credential.ScopeExecute, time.Now().Add(time.Hour), hash)
		if err != nil {
			t.Fatal(err)
		}
		return secret, c.ID
	}
	leaked, leakedID := issue()
	old, oldID := issue()
	live, _ := issue()
	for _, id := range []string{leakedID, oldID} {
		if err := h.store.RevokeCredential(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	reasons := map[string]int{}
	for i := range 20 {
		secret := leaked
		if i%2 == 1 {
			secret = old
		}
		_, code := deniedCode(t, h.checkRefund(t, secret, fmt.Sprintf("leaked-%d", i), 100+i))
		reasons[code]++
	}
	if reasons[engine.ReasonCredentialRevoked] != 3 || reasons[engine.ReasonDecisionsLimited] != 17 {
		t.Fatalf("two revoked credentials' 20 requests = %v; want 3 refused as revoked, then the bucket they share empty", reasons)
	}
	if resp := h.checkRefund(t, live, "live", 500); codes.Code(resp.GetStatus().GetCode()) != codes.OK {
		t.Fatalf("the agent's live credential after the flood: %v", resp.GetStatus())
	}
}

// TestGetIntentIsChargedToTheAgent: each native GetIntent (a credential
// lookup, then the intent and its attempts' stored requests and answers)
// takes a decision from the agent's bucket, as decisions and reports do;
// past it, ResourceExhausted (found by a review: 200 of 200 answered with a
// bucket of 3).
func TestGetIntentIsChargedToTheAgent(t *testing.T) {
	h := railHarness(t, harnessOption{cfg: func(c *config.Config) {
		c.AgentDecisionRate, c.AgentDecisionBurst = 0.001, 3
	}})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+h.secret)
	c := countersignv1.NewDecisionServiceClient(h.conn)
	var codesSeen []codes.Code
	for range 6 {
		_, err := c.GetIntent(ctx, &countersignv1.DecisionServiceGetIntentRequest{RailAccount: "acct_bench", Sik: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
		codesSeen = append(codesSeen, status.Code(err))
	}
	want := []codes.Code{codes.NotFound, codes.NotFound, codes.NotFound, codes.ResourceExhausted, codes.ResourceExhausted, codes.ResourceExhausted}
	if !slices.Equal(codesSeen, want) {
		t.Fatalf("six GetIntents with a bucket of 3 = %v, want %v", codesSeen, want)
	}
}
