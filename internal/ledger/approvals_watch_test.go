package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testing/wait"
)

// TestLiveApprovalsMarkChangesWithTheLiveSet: the mark stays the same while
// nothing a watcher compares changes, and changes when an approval opens,
// is approved, is decided out of the set, or runs out; another agent's
// approval changes only the unfiltered mark.
func TestLiveApprovalsMarkChangesWithTheLiveSet(t *testing.T) {
	ctx := context.Background()
	f := newOutboxFixture(t, "own_mark")
	other, err := f.s.CreateAgent(ctx, f.owner, "other bot")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	hold := func(agentID string, ttl time.Duration) string {
		t.Helper()
		n++
		p := proposal(n)
		p.AgentID = agentID
		if err := holdNew(ctx, f.s, p, ApprovalSpec{TTL: ttl}); err != nil {
			t.Fatalf("held intent: %v", err)
		}
		as, err := f.s.LiveApprovals(ctx, f.owner, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.SIK == p.SIK {
				return a.ID
			}
		}
		t.Fatalf("no approval for intent %d", n)
		return ""
	}
	mark := func(agentID string) string {
		t.Helper()
		m, err := f.s.LiveApprovalsMark(ctx, f.owner, agentID, 100)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// step applies change and checks which marks (all, mine) it changed.
	step := func(what string, change func(), wantAll, wantMine bool) {
		t.Helper()
		all, mine := mark(""), mark(f.agent.ID)
		change()
		if gotAll, gotMine := mark("") != all, mark(f.agent.ID) != mine; gotAll != wantAll || gotMine != wantMine {
			t.Fatalf("%s: the mark changed %v, the agent's %v; want %v and %v", what, gotAll, gotMine, wantAll, wantMine)
		}
	}
	var first, second string
	step("nothing", func() {}, false, false)
	step("a HOLD", func() { first = hold(f.agent.ID, time.Hour) }, true, true)
	step("another agent's HOLD", func() { _ = hold(other.ID, time.Hour) }, true, false)
	step("an approval", func() {
		if _, err := f.s.Approve(ctx, f.owner, first, "", "ok"); err != nil {
			t.Fatal(err)
		}
	}, true, true)
	step("a HOLD", func() { second = hold(f.agent.ID, time.Hour) }, true, true)
	step("a rejection", func() {
		if _, err := f.s.Reject(ctx, f.owner, second, "no"); err != nil {
			t.Fatal(err)
		}
	}, true, true)
	before := mark(f.agent.ID)
	// Short, but long enough to be read live on a loaded machine (50 ms
	// ran out before the helper's own read of it under a CI run's load).
	_ = hold(f.agent.ID, 2*time.Second)
	opened := mark(f.agent.ID)
	if opened == before {
		t.Fatal("a short HOLD did not change the mark")
	}
	if !wait.Until(10*time.Second, func() bool { return mark(f.agent.ID) == before }) {
		t.Fatal("the mark did not change back when the short approval ran out")
	}
}
