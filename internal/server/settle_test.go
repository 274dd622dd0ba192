package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/envoystandin"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestNoAbsenceWhileTheRailMayStillApply: Envoy gives the rail call its
// route's timeout, and a rail goes on with a request whose client gave up.
// A refund the rail applies 5 s after it left, past the route's 2 s
// timeout (the agent gets a 504), must not be proven absent by a listing
// made before the rail is done: its hold stays held (a second refund on
// the room it holds is refused) and the reconciler, listing only once the
// settle time has passed, finds it applied. Found by a review: the
// reconciler listed 2 s after the timeout, settled it CONFIRMED_NOT_APPLIED,
// voided its hold, and 1999 were refunded under a budget of 1000.
func TestNoAbsenceWhileTheRailMayStillApply(t *testing.T) {
	h := bareRailHarness(t, harnessOption{
		mock: []mockrail.Option{mockrail.WithFaults(mockrail.Fault{Profile: mockrail.FaultSlow, Count: 1, Method: "POST", Path: "/v1/refunds",
			Delay: mockrail.Duration(5 * time.Second)})},
		cfg: func(c *config.Config) {
			c.ReconcileDelay = 50 * time.Millisecond
			c.ReconcileInterval = 100 * time.Millisecond
			c.RailSettle = 6 * time.Second
		}})
	ctx := context.Background()
	m := mandateFor(h)
	m.Grants = m.Grants[:1]
	m.Grants[0].MaxAmountMinor = 1000
	m.Budgets = []*countersignv1.Money{{Currency: "USD", AmountMinor: 1000}}
	rec, err := mandateRecord(m)
	if err != nil {
		t.Fatal(err)
	}
	grantAccountOfAgent(t, h.store, "acct_bench", h.agentID)
	if _, err := h.store.CreateMandate(ctx, rec); err != nil {
		t.Fatal(err)
	}
	p, err := envoystandin.Start(ctx, envoystandin.Config{
		ExtAuthz: h.envoyAddr, ExtProc: h.envoyAddr, MaxRequestBytes: 64 << 10, AllowPartialMessage: true,
		Timeout: 30 * time.Second, ExtProcMessageTimeout: 30 * time.Second,
		Routes: []envoystandin.Route{{Prefix: "*", Upstream: h.mockURL, HostRewrite: "api.stripe.com", Timeout: 2 * time.Second,
			ContextExtensions: map[string]string{"rail_account": "acct_bench"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	base := "http://" + p.Addr()

	if a := refundVia(t, base, h.secret, "payment_intent=pi_bench&amount=1000"); a.status != http.StatusGatewayTimeout {
		t.Fatalf("the slow refund answered %d %.200s, want the route's 504", a.status, a.body)
	}
	its, err := h.store.OwnerIntents(ctx, h.ownerID, ledger.IntentFilter{}, nil, 10)
	if err != nil || len(its) != 1 {
		t.Fatalf("intents = %+v, %v", its, err)
	}
	k := its[0].Key
	// The rail has not applied it yet: its hold still holds the budget.
	if second := refundVia(t, base, h.secret, "payment_intent=pi_bench&amount=999"); second.status == http.StatusOK {
		t.Fatalf("a second refund was allowed on the room the first still holds: %.200s", second.body)
	}
	if !wait.Until(30*time.Second, func() bool {
		it, _, err := h.store.GetIntent(ctx, k)
		return err == nil && (it.State == intent.Applied || it.State == intent.ConfirmedNotApplied)
	}) {
		it, _, _ := h.store.GetIntent(ctx, k)
		t.Fatalf("the slow refund is %s, not settled", it.State)
	}
	it, _, _ := h.store.GetIntent(ctx, k)
	fs, err := h.store.FindingsFor(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Outcome == ledger.FindingAbsent {
			t.Fatalf("the refund was proven absent while the rail could still apply it (%s)", f.Detail)
		}
	}
	if it.State != intent.Applied || refundsOf(h.mock.Journal()) != 1 {
		t.Fatalf("the slow refund is %s with %d rail refunds, want APPLIED and 1", it.State, refundsOf(h.mock.Journal()))
	}
	bs, err := h.store.Budgets(ctx, rec.Hash)
	if err != nil || len(bs) != 1 || bs[0].Spent != 1000 || bs[0].Held != 0 {
		t.Fatalf("budget = %+v, %v; want 1000 spent", bs, err)
	}
}
