package ledger

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/testing/wait"
)

// scopedProposal is proposal n on railAccount, made by agentID ("" for
// none).
func scopedProposal(n int, railAccount, agentID string) testProposal {
	p := proposal(n)
	p.RailAccount, p.NewIntent.RailAccount, p.AttemptStart.RailAccount = railAccount, railAccount, railAccount
	p.AgentID = agentID
	return p
}

// scopeFixture is two owners' intents: own_a holds acct_test and acct_two,
// own_b holds acct_test too (two owners on one account), and own_c holds
// nothing and has no agent.
type scopeFixture struct {
	a1, a2, aUnheld, b, none testProposal
}

func newScopeFixture(t *testing.T, s *Store, leaseTTL time.Duration) scopeFixture {
	t.Helper()
	ctx := context.Background()
	for _, g := range []struct{ acct, owner string }{{"acct_test", "own_a"}, {"acct_two", "own_a"}, {"acct_test", "own_b"}} {
		if _, err := s.GrantRailAccount(ctx, g.acct, g.owner); err != nil {
			t.Fatal(err)
		}
	}
	agentA, err := s.CreateAgent(ctx, "own_a", "a's bot")
	if err != nil {
		t.Fatal(err)
	}
	agentB, err := s.CreateAgent(ctx, "own_b", "b's bot")
	if err != nil {
		t.Fatal(err)
	}
	f := scopeFixture{
		a1:      scopedProposal(71, "acct_test", agentA.ID),
		a2:      scopedProposal(72, "acct_two", agentA.ID),
		aUnheld: scopedProposal(73, "acct_three", agentA.ID), // own_a's agent, on an account own_a does not hold
		b:       scopedProposal(74, "acct_test", agentB.ID),
		none:    scopedProposal(75, "acct_test", ""),
	}
	for _, p := range f.all() {
		p.LeaseTTL = leaseTTL
		if _, err := startFirst(ctx, s, p); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f scopeFixture) all() []testProposal { return []testProposal{f.a1, f.a2, f.aUnheld, f.b, f.none} }

func claimedKeys(work []ReconcileWork) []Key {
	var out []Key
	for _, w := range work {
		out = append(out, w.Intent.Key)
	}
	slices.SortFunc(out, func(x, y Key) int {
		return cmp.Or(strings.Compare(x.RailAccount, y.RailAccount), strings.Compare(x.SIK, y.SIK))
	})
	return out
}

func keysOf(ps ...testProposal) []Key {
	var ws []ReconcileWork
	for _, p := range ps {
		ws = append(ws, ReconcileWork{Intent: Intent{Key: p.Key}})
	}
	return claimedKeys(ws)
}

// TestAnOwnersReconcileClaimsOnlyItsOwn: a claim scoped to an owner takes
// only intents of its agents on rail accounts it holds (not another
// owner's on an account both hold, not one of its agents' on an account it
// does not hold, not one without an agent), honours the rail account and
// the limit, and moves nothing else; the unscoped claim (the reconciler's
// own pass) still takes everything due.
func TestAnOwnersReconcileClaimsOnlyItsOwn(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	f := newScopeFixture(t, s, time.Minute)
	for _, p := range f.all() {
		if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "timeout"}); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name  string
		scope ReconcileScope
		limit int
		want  []Key
	}{
		{"an owner holding nothing", ReconcileScope{OwnerID: "own_c"}, 10, nil},
		{"an owner naming an account it does not hold", ReconcileScope{OwnerID: "own_c", RailAccount: "acct_test"}, 10, nil},
		{"own_b, on the account both hold", ReconcileScope{OwnerID: "own_b", RailAccount: "acct_test"}, 10, keysOf(f.b)},
		{"own_a, one account", ReconcileScope{OwnerID: "own_a", RailAccount: "acct_two"}, 10, keysOf(f.a2)},
		{"own_a, another's intent named", ReconcileScope{OwnerID: "own_a", Only: &f.none.Key}, 10, nil},
		{"own_a, its own agent's intent on an account it does not hold", ReconcileScope{OwnerID: "own_a", Only: &f.aUnheld.Key}, 10, nil},
		{"own_a, every account", ReconcileScope{OwnerID: "own_a"}, 10, keysOf(f.a1)},
		{"the reconciler's own pass", ReconcileScope{}, 10, keysOf(f.aUnheld, f.none)},
	}
	claimed := map[Key]bool{}
	for _, st := range steps {
		work, err := s.ClaimReconcileIn(ctx, "rec", time.Minute, st.limit, st.scope)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := claimedKeys(work); !slices.Equal(got, st.want) {
			t.Fatalf("%s claimed %v, want %v", st.name, got, st.want)
		}
		for _, w := range work {
			claimed[w.Intent.Key] = true
		}
		// Only what was claimed moved.
		for _, p := range f.all() {
			it, _, err := s.GetIntent(ctx, p.Key)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]intent.State{true: intent.Reconciling, false: intent.Unknown}[claimed[p.Key]]; it.State != want {
				t.Fatalf("after %s: %s is %s, want %s", st.name, p.Key, it.State, want)
			}
		}
	}
}

// TestAnOwnersReconcileHonoursItsLimit: an owner's claim takes at most
// limit of its due intents; the next claim takes the rest.
func TestAnOwnersReconcileHonoursItsLimit(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	f := newScopeFixture(t, s, time.Minute)
	for _, p := range f.all() {
		if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "timeout"}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := s.ClaimReconcileIn(ctx, "rec", time.Minute, 1, ReconcileScope{OwnerID: "own_a"})
	if err != nil || len(first) != 1 {
		t.Fatalf("claim of 1 = %v, %v", claimedKeys(first), err)
	}
	rest, err := s.ClaimReconcileIn(ctx, "rec", time.Minute, 10, ReconcileScope{OwnerID: "own_a"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := claimedKeys(append(first, rest...)), keysOf(f.a1, f.a2); !slices.Equal(got, want) {
		t.Fatalf("own_a's claims took %v, want %v", got, want)
	}
}

// TestAnOwnersPassExpiresOnlyItsOwnLeases: the lease expiry an owner's
// pass runs moves only its own agents' IN_FLIGHT intents (on accounts it
// holds) to UNKNOWN; the unscoped expiry moves the rest.
func TestAnOwnersPassExpiresOnlyItsOwnLeases(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	f := newScopeFixture(t, s, time.Millisecond)
	expire := func(scope ReconcileScope, want int) {
		t.Helper()
		// The 1 ms leases run out one by one: expiry is retried, counting
		// what each pass moved, until want have moved.
		total := 0
		var err error
		wait.Until(10*time.Second, func() bool {
			var n int
			n, err = s.ExpireLeasesIn(ctx, 100, 0, scope)
			total += n
			return err != nil || total >= want
		})
		if err != nil || total != want {
			t.Fatalf("ExpireLeasesIn(%+v) moved %d (%v), want %d", scope, total, err, want)
		}
	}
	expire(ReconcileScope{OwnerID: "own_a"}, 2) // a1 and a2, not aUnheld
	if n, err := s.ExpireLeasesIn(ctx, 100, 0, ReconcileScope{OwnerID: "own_c"}); err != nil || n != 0 {
		t.Fatalf("own_c's expiry = %d, %v", n, err)
	}
	for _, p := range f.all() {
		it, _, err := s.GetIntent(ctx, p.Key)
		if err != nil {
			t.Fatal(err)
		}
		want := intent.InFlight
		if p.Key == f.a1.Key || p.Key == f.a2.Key {
			want = intent.Unknown
		}
		if it.State != want {
			t.Fatalf("after own_a's expiry: %s is %s, want %s", p.Key, it.State, want)
		}
	}
	expire(ReconcileScope{}, 3)
}
