package ledger

import (
	"context"
	"testing"
	"time"
)

// TestReplacingAMandateVoidsItsApprovals: a mandate that replaces its
// agent's mandate on a rail account voids the approvals opened under the
// one it replaces, pending and approved, in its own transaction, as a
// revocation does; it leaves another agent's approvals, and the agent's
// under its mandate on another account. A mandate valid only from a later
// time replaces nothing yet and voids nothing. Before, a replacement voided
// nothing: the owner could approve, and the agent use, an approval opened
// under the old mandate with its limits and its approval lifetime (found by
// a review).
func TestReplacingAMandateVoidsItsApprovals(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	const owner = "own_replace"
	a := createMandateAgent(t, s, owner)
	b := createMandateAgent(t, s, owner)
	now := time.Now().Truncate(time.Second)
	from, until := now.Add(-time.Hour), now.Add(24*time.Hour)
	m1 := testMandate(t, a.ID, "acct_1", from, until, "M1")
	mA2 := testMandate(t, a.ID, "acct_2", from, until, "agent A on another account")
	mB := testMandate(t, b.ID, "acct_1", from, until, "agent B")
	for _, m := range []MandateRecord{m1, mA2, mB} {
		mustCreateMandate(t, s, m)
	}

	// held opens the pending approval of intent n of agent on account,
	// under mandate hash, and returns its id.
	held := func(agent, account string, n int, hash string) string {
		t.Helper()
		p := proposal(n)
		p.RailAccount, p.NewIntent.RailAccount, p.AgentID = account, account, agent
		if err := holdNew(ctx, s, p, ApprovalSpec{AgentID: agent, MandateHash: hash, TTL: time.Hour}); err != nil {
			t.Fatalf("hold intent %d: %v", n, err)
		}
		var id string
		if err := s.pool.QueryRow(ctx, `SELECT id FROM approvals WHERE rail_account = $1 AND sik = $2`, account, p.Key.SIK).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	pending := held(a.ID, "acct_1", 1, m1.Hash)
	approved := held(a.ID, "acct_1", 2, m1.Hash)
	if _, err := s.Approve(ctx, owner, approved, "", "ok under M1"); err != nil {
		t.Fatal(err)
	}
	otherAccount := held(a.ID, "acct_2", 3, mA2.Hash)
	otherAgent := held(b.ID, "acct_1", 4, mB.Hash)

	state := func(id string) string {
		t.Helper()
		a, err := s.GetApproval(ctx, owner, id)
		if err != nil {
			t.Fatal(err)
		}
		return a.State
	}
	check := func(when string, want map[string]string) {
		t.Helper()
		for id, w := range want {
			if got := state(id); got != w {
				t.Errorf("%s: approval %s is %s, want %s", when, id, got, w)
			}
		}
	}

	// A replacement that takes effect tomorrow: M1 still decides today.
	later := testMandate(t, a.ID, "acct_1", now.Add(24*time.Hour), now.Add(48*time.Hour), "M2 from tomorrow")
	mustCreateMandate(t, s, later)
	check("after a mandate valid from tomorrow", map[string]string{pending: "pending", approved: "approved", otherAccount: "pending", otherAgent: "pending"})

	m2 := testMandate(t, a.ID, "acct_1", from, until, "M2 replaces M1")
	mustCreateMandate(t, s, m2)
	check("after M2 replaces M1", map[string]string{pending: "void", approved: "void", otherAccount: "pending", otherAgent: "pending"})
	if t.Failed() {
		return
	}

	// Storing M1 again changes nothing (CreateMandate is idempotent on the
	// hash), so it voids nothing: M2's approvals stay.
	underM2 := held(a.ID, "acct_1", 5, m2.Hash)
	if created, err := s.CreateMandate(ctx, m1); err != nil || created {
		t.Fatalf("CreateMandate(M1 again) = %v, %v; want not created", created, err)
	}
	check("after storing M1 again", map[string]string{underM2: "pending"})
}
