package engine

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestReplacementWaitsForDecisionsInProgress: once CreateMandate has
// returned a mandate that replaces the agent's newest, no decision under
// the replaced one commits. A decision already under way when the owner
// replaces the mandate (here, waiting for its mandate's lock behind
// another decision) commits first, and the replacement returns after it;
// the next decision is judged by the new mandate. Before, the replacement
// was a plain INSERT that waited for nothing: it returned at once, and the
// decision in progress then committed an ALLOW of 1000 under the mandate
// the owner had just lowered to 500 (found by a review).
func TestReplacementWaitsForDecisionsInProgress(t *testing.T) {
	budgeted := func(m *countersignv1.Mandate) {
		// A budget: decisions take the mandate lineage's lock.
		m.Budgets = []*countersignv1.Money{{AmountMinor: 1 << 40, Currency: "USD"}}
	}
	r := newRig(t, budgeted)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := r.principal(t)

	holder, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Close(context.Background()) }()
	watcher, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watcher.Close(context.Background()) }()
	waiting := func(n int) bool {
		var got int
		err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&got)
		return err == nil && got >= n
	}

	// Another decision of the lineage holds its lock (a transaction of
	// the test's, as a decision's would).
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT countersign_lock_lineage($1)`, r.mandateHash); err != nil {
		t.Fatal(err)
	}
	decided := make(chan Outcome, 1)
	go func() { decided <- r.e.Decide(ctx, r.refundOf(1000)) }()
	if !wait.Until(20*time.Second, func() bool { return waiting(1) }) {
		t.Fatal("the decision never waited for the mandate's lock")
	}

	// The owner lowers the per-refund maximum to 500: a new mandate.
	now := time.Now().Truncate(time.Second)
	m2 := &countersignv1.Mandate{
		Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_1", AgentId: p.Agent.ID, Purpose: "tightened",
		ValidFrom: timestamppb.New(now.Add(-time.Hour)), ValidUntil: timestamppb.New(now.Add(24 * time.Hour)),
		Mode:   countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 500, Currencies: []string{"USD"}}},
	}
	budgeted(m2)
	rec, err := mandate.Record(m2)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		err error
		// committedBefore counts the 1000 refund's intents as the
		// replacement returned.
		committedBefore int
	}
	replaced := make(chan result, 1)
	go func() {
		_, err := r.store.CreateMandate(ctx, rec)
		res := result{err: err}
		if err == nil {
			res.err = watcher.QueryRow(ctx, `SELECT count(*) FROM intents WHERE amount_minor = 1000`).Scan(&res.committedBefore)
		}
		replaced <- res
	}()
	// The replacement waits behind the decision (two advisory locks
	// wanted: the decision's, the replacement's), or, without the fix,
	// has already returned.
	if !wait.Until(20*time.Second, func() bool {
		select {
		case res := <-replaced:
			replaced <- res
			return true
		default:
			return waiting(2)
		}
	}) {
		t.Fatal("the replacement neither returned nor waited")
	}
	select {
	case res := <-replaced:
		t.Fatalf("the replacement returned (%v) while a decision under the mandate it replaces was still in progress", res.err)
	default:
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-replaced
	if res.err != nil {
		t.Fatalf("replace the mandate: %v", res.err)
	}
	if res.committedBefore != 1 {
		t.Fatalf("when the replacement returned, %d intents of the refund under the old mandate were committed; want 1 (it commits first)", res.committedBefore)
	}
	if out := <-decided; out.Verdict != Allow {
		t.Fatalf("the decision under way = %s %s %s, want ALLOW under the mandate in force when it began", out.Verdict, out.ReasonCode, out.Reason)
	}
	// The next decision is the new mandate's.
	if out := r.e.Decide(ctx, r.refundOf(1001)); out.Verdict != Block {
		t.Fatalf("a refund of 1001 after the replacement = %s %s, want BLOCK (maximum 500)", out.Verdict, out.Reason)
	}
}
