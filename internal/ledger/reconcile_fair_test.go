package ledger

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/testing/wait"
)

// fairFixture is a backlog of one agent and a single intent of two
// others: own_a's agent a1 has backlog intents, started first; then
// own_a's second agent a2 has one, and own_b's agent b one, started last.
// All are on acct_test, which both owners hold.
type fairFixture struct {
	backlog []testProposal
	a2, b   testProposal
}

func (f fairFixture) all() []testProposal { return append(slices.Clone(f.backlog), f.a2, f.b) }

func newFairFixture(t *testing.T, s *Store, backlog int, leaseTTL time.Duration) fairFixture {
	t.Helper()
	ctx := context.Background()
	for _, o := range []string{"own_a", "own_b"} {
		if _, err := s.GrantRailAccount(ctx, "acct_test", o); err != nil {
			t.Fatal(err)
		}
	}
	agent := func(owner, name string) string {
		a, err := s.CreateAgent(ctx, owner, name)
		if err != nil {
			t.Fatal(err)
		}
		return a.ID
	}
	a1, a2, b := agent("own_a", "a's busy bot"), agent("own_a", "a's quiet bot"), agent("own_b", "b's bot")
	var f fairFixture
	for i := range backlog {
		f.backlog = append(f.backlog, scopedProposal(200+i, "acct_test", a1))
	}
	f.a2 = scopedProposal(199, "acct_test", a2)
	f.b = scopedProposal(198, "acct_test", b)
	// Started one by one, in this order: b's is the newest, last in any
	// global order (next_reconcile_at, updated_at).
	for _, p := range f.all() {
		p.LeaseTTL = leaseTTL
		if _, err := startFirst(ctx, s, p); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestReconcileClaimIsSharedAmongOwnersAndAgents: with one agent's backlog
// due before them, the first claim still takes another owner's intent and
// the same owner's other agent's: an owner's turn 1 comes before any
// owner's turn 2, and an owner's turns go round its agents. In global
// order the claim took the backlog's oldest only, and the others waited a
// pass per batch of the backlog (found by a review). A claim with one
// agent's work only still takes its full limit.
func TestReconcileClaimIsSharedAmongOwnersAndAgents(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	f := newFairFixture(t, s, 40, time.Minute)
	for _, p := range f.all() {
		if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "timeout"}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := s.ClaimReconcileIn(ctx, "rec", time.Minute, 3, ReconcileScope{})
	if err != nil {
		t.Fatal(err)
	}
	// Turn 1 of own_a (a1's oldest) and of own_b (b's), then own_a's turn
	// 2, which is a2's: a1 has had its turn.
	if got, want := claimedKeys(first), keysOf(f.backlog[0], f.a2, f.b); !slices.Equal(got, want) {
		t.Fatalf("first claim took %v, want a1's oldest, a2's and b's %v", got, want)
	}
	second, err := s.ClaimReconcileIn(ctx, "rec", time.Minute, 16, ReconcileScope{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := claimedKeys(second), keysOf(f.backlog[1:17]...); !slices.Equal(got, want) {
		t.Fatalf("second claim took %v, want the backlog's next 16 %v", got, want)
	}
	// An owner's pass shares its claim among its own agents the same way.
	for _, w := range append(first, second...) {
		if _, err := s.RecordFinding(ctx, Finding{Key: w.Intent.Key, AttemptSeq: 1, Outcome: FindingInconclusive,
			Owner: "rec", Detail: "listing failed"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, `UPDATE intents SET next_reconcile_at = now() - interval '1 second' WHERE state = 'UNKNOWN'`); err != nil {
		t.Fatal(err)
	}
	own, err := s.ClaimReconcileIn(ctx, "rec", time.Minute, 2, ReconcileScope{OwnerID: "own_a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(own) != 2 || !slices.ContainsFunc(own, func(w ReconcileWork) bool { return w.Intent.Key == f.a2.Key }) {
		t.Fatalf("own_a's claim of 2 took %v, want a2's among them", claimedKeys(own))
	}
}

// TestLeaseExpiryIsSharedAmongOwnersAndAgents: lease expiry, capped a
// pass, moves another owner's (and another agent's) expired attempt in
// its first pass, however many of one agent's expired before.
func TestLeaseExpiryIsSharedAmongOwnersAndAgents(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	f := newFairFixture(t, s, 40, time.Millisecond)
	total := len(f.all())
	// The 1 ms leases run out; wait until the database sees them all out.
	var expired int
	if !wait.Until(10*time.Second, func() bool {
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE lease_expires_at < now()`).Scan(&expired)
		return err == nil && expired == total
	}) {
		t.Fatalf("%d of %d leases expired", expired, total)
	}
	n, err := s.ExpireLeasesIn(ctx, 3, 0, ReconcileScope{})
	if err != nil || n != 3 {
		t.Fatalf("expiry moved %d (%v), want 3", n, err)
	}
	want := map[Key]bool{f.backlog[0].Key: true, f.a2.Key: true, f.b.Key: true}
	for _, p := range f.all() {
		it, _, err := s.GetIntent(ctx, p.Key)
		if err != nil {
			t.Fatal(err)
		}
		if st := map[bool]intent.State{true: intent.Unknown, false: intent.InFlight}[want[p.Key]]; it.State != st {
			t.Fatalf("after one capped expiry %s is %s, want %s", describe(f, p), it.State, st)
		}
	}
}

func describe(f fairFixture, p testProposal) string {
	switch p.Key {
	case f.a2.Key:
		return "a2's intent"
	case f.b.Key:
		return "b's intent"
	}
	return fmt.Sprintf("a1's intent %s", p.SIK)
}
