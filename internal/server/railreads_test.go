package server

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// railGets counts the reads the mock rail answered.
func railGets(m *mockrail.Server) int {
	n := 0
	for _, r := range m.Journal().Requests {
		if r.Method == http.MethodGet {
			n++
		}
	}
	return n
}

// checkRefund is Envoy's Check of a refund of amount on pi_bench, sent
// with secret, as request id.
func (h *allowHarness) checkRefund(t *testing.T, secret, id string, amount int) *authv3.CheckResponse {
	t.Helper()
	resp, err := h.client.Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{"rail_account": "acct_bench"},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: id, Method: "POST", Host: "stripe.local", Path: "/v1/refunds",
			Headers: map[string]string{"authorization": "Bearer " + secret, "content-type": "application/x-www-form-urlencoded"},
			Body:    "payment_intent=pi_bench&amount=" + strconv.Itoa(amount),
		}},
	}})
	if err != nil {
		t.Fatalf("Check returned a gRPC error (a deny must be a response): %v", err)
	}
	return resp
}

// TestRailReadsAreLimitedPerAgent: an agent whose new requests have used
// up its rail reads on the account is refused before the rail is read,
// through Envoy as a 429 with Retry-After and through the native Decide
// RPC with the same reason code, status and header; the refusal is one
// decision record; another agent of the same owner on the same account is
// not held back.
func TestRailReadsAreLimitedPerAgent(t *testing.T) {
	// 3 at once, then one each 1000 s: no refill during the test.
	h := railHarness(t, harnessOption{cfg: func(c *config.Config) { c.AgentRailReadRate, c.AgentRailReadBurst = 0.001, 3 }})
	for i := range 3 {
		if resp := h.checkRefund(t, h.secret, fmt.Sprintf("rl-%d", i), 100+i); codes.Code(resp.GetStatus().GetCode()) != codes.OK {
			t.Fatalf("refund %d within the burst: %v", i, resp.GetStatus())
		}
	}
	reads := railGets(h.mock)
	if reads != 3 {
		t.Fatalf("%d rail reads for three new refunds; want three", reads)
	}

	resp := h.checkRefund(t, h.secret, "rl-over", 200)
	status, code := deniedCode(t, resp)
	if status != http.StatusTooManyRequests || code != engine.ReasonRailReadsLimited {
		t.Fatalf("refund past the burst through Envoy = %d %s; want 429 %s", status, code, engine.ReasonRailReadsLimited)
	}
	headers := map[string]string{}
	for _, hv := range resp.GetDeniedResponse().GetHeaders() {
		headers[hv.GetHeader().GetKey()] = hv.GetHeader().GetValue()
	}
	if headers["retry-after"] != "1000" || headers["x-countersign-reason"] != engine.ReasonRailReadsLimited {
		t.Fatalf("denied headers %v: want retry-after 1000 and the reason", headers)
	}
	ds, err := h.store.DecisionsByRequest(context.Background(), "rl-over")
	if err != nil || len(ds) != 1 || ds[0].ReasonCode != engine.ReasonRailReadsLimited {
		t.Fatalf("decisions of the refused request = %+v, %v; want one, %s", ds, err, engine.ReasonRailReadsLimited)
	}

	// The native API: the same refusal, as a verdict.
	d := h.decide(t, refund("pi_bench", 300, ""))
	if d.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || d.GetReasonCode() != engine.ReasonRailReadsLimited ||
		d.GetRefusal().GetHttpStatus() != http.StatusTooManyRequests || d.GetRefusal().GetHeaders()["retry-after"] != "1000" {
		t.Fatalf("native Decide past the burst = %s %s, refusal %d %v", d.GetVerdict(), d.GetReasonCode(), d.GetRefusal().GetHttpStatus(), d.GetRefusal().GetHeaders())
	}
	if n := railGets(h.mock); n != reads {
		t.Fatalf("%d rail reads after the refusals, %d before: a refused request read the rail", n, reads)
	}

	// Another agent of the same owner, on the same account.
	secret, agentID := newAgentCredential(t, h.store, h.ownerID, "second agent")
	grantAll(t, h.store, agentID, "acct_bench")
	if resp := h.checkRefund(t, secret, "rl-other", 400); codes.Code(resp.GetStatus().GetCode()) != codes.OK {
		t.Fatalf("another agent's refund: %v", resp.GetStatus())
	}
}

// TestRailReadLimitIsOnByDefault: under serve's default settings, an agent
// that floods new refunds causes no more rail reads than the default
// bucket holds plus what its rate refilled while the flood lasted; every
// request beyond them is refused for it, and none of those read the rail.
func TestRailReadLimitIsOnByDefault(t *testing.T) {
	// The limit on decisions (TestDecisionLimitIsOnByDefault) is off, so
	// every request of the flood reaches the rail-read bucket.
	h := railHarness(t, harnessOption{cfg: func(c *config.Config) { c.AgentDecisionRate = 0 }})
	const n = 200
	var (
		mu      sync.Mutex
		reasons = map[string]int{}
		wg      sync.WaitGroup
	)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := h.decide(t, refund("pi_bench", 100, fmt.Sprintf("flood %d", i)))
			mu.Lock()
			reasons[r.GetReasonCode()]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reads := railGets(h.mock)
	bound := config.DefaultAgentRailReadBurst + int(math.Ceil(config.DefaultAgentRailReadRate*elapsed.Seconds()))
	t.Logf("%d requests in %s: %v, %d rail reads (bound %d)", n, elapsed, reasons, reads, bound)
	if reads > bound {
		t.Fatalf("%d rail reads in %s: more than the default burst %d and rate %d a second allow (%d)",
			reads, elapsed, config.DefaultAgentRailReadBurst, config.DefaultAgentRailReadRate, bound)
	}
	if reasons[engine.ReasonAllowed] != reads || reasons[engine.ReasonRailReadsLimited] != n-reads {
		t.Fatalf("reasons %v with %d rail reads: want one ALLOW per read and every other request refused as %s", reasons, reads, engine.ReasonRailReadsLimited)
	}
}
