package engine

import (
	"context"
	"sync"
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

	counter, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = counter.Close(context.Background()) }()
	release, waiting := holdLineage(t, ctx, r)
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
			res.err = counter.QueryRow(ctx, `SELECT count(*) FROM intents WHERE amount_minor = 1000`).Scan(&res.committedBefore)
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

	release()
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

// TestRailAccountWithdrawalHoldsBackLaterDecisions: while the operator's
// withdrawal of a rail account from its owner waits for a decision under
// way, a decision that comes after it waits for it too, and is refused
// once it has gone through. Before, the withdrawal's UPDATE of the
// mandates waited for the share locks of decisions that went on being
// granted beside it (a later decision went ahead and was allowed), so an
// agent deciding fast enough held the withdrawal back (found by a review:
// 8 s in a race that revocations of a credential, an agent or a mandate
// finish in 1).
func TestRailAccountWithdrawalHoldsBackLaterDecisions(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Budgets = []*countersignv1.Money{{AmountMinor: 1 << 40, Currency: "USD"}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := r.principal(t)
	release, waiting := holdLineage(t, ctx, r)
	first := make(chan Outcome, 1)
	go func() { first <- r.e.Decide(ctx, r.refundOf(1000)) }()
	if !wait.Until(20*time.Second, func() bool { return waiting(1) }) {
		t.Fatal("the first decision never waited for the mandate's lock")
	}
	withdrawn := make(chan error, 1)
	go func() { _, err := r.store.RevokeRailAccount(ctx, "acct_1", p.Agent.OwnerID); withdrawn <- err }()
	if !wait.Until(20*time.Second, func() bool { return waiting(2) }) {
		t.Fatal("the withdrawal never waited")
	}
	later := make(chan Outcome, 1)
	go func() { later <- r.e.Decide(ctx, r.refundOf(1001)) }()
	// The later decision waits behind the withdrawal (a third lock
	// wanted), or, without the fix, waits for the mandate's lock beside
	// the first: either way three waiters.
	if !wait.Until(20*time.Second, func() bool { return waiting(3) }) {
		t.Fatal("the later decision never waited")
	}
	release()
	if out := <-first; out.Verdict != Allow {
		t.Fatalf("the decision under way = %s %s, want ALLOW", out.Verdict, out.Reason)
	}
	if err := <-withdrawn; err != nil {
		t.Fatalf("withdraw the rail account: %v", err)
	}
	if out := <-later; out.Verdict != Block {
		t.Fatalf("a decision that came after the withdrawal began = %s %s, want BLOCK once it has gone through", out.Verdict, out.Reason)
	}
}

// holdLineage holds the rig's mandate lineage lock in a transaction of the
// test's, as another decision of the lineage would, until release; waiting
// reports whether at least n lock requests are waiting.
func holdLineage(t *testing.T, ctx context.Context, r *rig) (release func(), waiting func(n int) bool) {
	t.Helper()
	holder, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	watcher, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watcher.Close(context.Background()) })
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(context.Background()) }) }
	t.Cleanup(release)
	if _, err := tx.Exec(ctx, `SELECT countersign_lock_lineage($1)`, r.mandateHash); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	return release, func(n int) bool {
		mu.Lock()
		defer mu.Unlock()
		var got int
		err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&got)
		return err == nil && got >= n
	}
}
