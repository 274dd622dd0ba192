package engine

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestDecisionsDoNotReadTheReconcilersIndexes: the reconciler's per-agent
// indexes of IN_FLIGHT and unsettled intents (migration 00043) serve its
// claims alone. Their first version could answer a decision's read as well,
// and the planner took it: every decision then read every intent the agent
// held in flight (measured: 590 index entries a decision after 1,200
// uncommitted ALLOWs, 0.3 ms and growing), so one agent that never commits
// slowed every decision.
func TestDecisionsDoNotReadTheReconcilersIndexes(t *testing.T) {
	const n = 300
	r := newRigWithPayments(t, n)
	ctx := context.Background()
	for i := range n {
		req := r.refund()
		req.Body = []byte("payment_intent=pi_" + strconv.Itoa(i) + "&amount=100")
		if out := r.e.Decide(ctx, req); out.Verdict != Allow {
			t.Fatalf("refund %d: %s %s", i, out.ReasonCode, out.Reason)
		}
	}
	c, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	// A backend reports its index statistics at most once a second, and an
	// idle one within ten: wait until the decisions' primary-key reads show.
	scans := func(index string) (n int64) {
		if err := c.QueryRow(ctx, `SELECT COALESCE(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = $1`, index).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if !wait.Until(30*time.Second, func() bool { return scans("intents_pkey") >= n }) {
		t.Fatalf("the decisions' reads of intents never showed in pg_stat_user_indexes (%d)", scans("intents_pkey"))
	}
	for _, index := range []string{"intents_in_flight_agent", "intents_reconcile_agent"} {
		if got := scans(index); got != 0 {
			t.Errorf("%d decisions scanned %s %d times", n, index, got)
		}
	}
}

// newRigWithPayments is a rig on a Stripe account acct_1 whose mock rail
// holds n payments, pi_0 to pi_{n-1}, each large enough for any refund
// of a test, so that each ALLOW can refund a payment of its own.
func newRigWithPayments(t *testing.T, n int, shape ...func(*countersignv1.Mandate)) *rig {
	t.Helper()
	pays := make([]mockrail.Payment, n)
	for i := range pays {
		pays[i] = mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_" + strconv.Itoa(i), Amount: 1 << 30, Currency: "usd"}
	}
	return newRigOn(t, rigRail{account: "acct_1", rail: sik.RailStripe, host: "api.stripe.com", key: mockrail.DefaultStripeKey,
		adapter: func() rail.Adapter { return stripe.New() }, mandateRail: countersignv1.Rail_RAIL_STRIPE,
		kind: countersignv1.ActionKind_ACTION_KIND_REFUND, currency: "USD", payments: pays}, shape...)
}
