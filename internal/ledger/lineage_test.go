package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testing/wait"
)

// TestALineagesDecisionsTakeTurns: the decisions under two mandates of one
// agent on one rail account, whose windows count each other's holds
// (migration 00036), take turns on one lock: a write under the newer
// mandate waits for the transaction holding the older one's turn, so two
// decisions at the moment a mandate replaces another cannot both take a
// window's last room; a write under another agent's mandate on the same
// account does not wait.
func TestALineagesDecisionsTakeTurns(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	agent := createMandateAgent(t, s, "own_lineage")
	other, err := s.CreateAgent(ctx, "own_lineage", "another agent")
	if err != nil {
		t.Fatal(err)
	}
	from, until := time.Now().Add(-time.Hour).Truncate(time.Second), time.Now().Add(time.Hour).Truncate(time.Second)
	older := testMandate(t, agent.ID, "acct_1", from, until, "older")
	newer := testMandate(t, agent.ID, "acct_1", from, until, "newer")
	theirs := testMandate(t, other.ID, "acct_1", from, until, "theirs")
	for _, m := range []MandateRecord{older, newer, theirs} {
		mustCreateMandate(t, s, m)
	}

	// A decision under the older mandate holds the lineage's turn.
	holding, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holding.Rollback(ctx) }()
	var pid int32
	if err := holding.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var held bool
	if err := holding.QueryRow(ctx, `SELECT `+lockLineageSQL, older.Hash).Scan(&held); err != nil || !held {
		t.Fatalf("taking the older mandate's turn: %v, %v", held, err)
	}

	write := func(hash string) error {
		w := s.NewWrite()
		w.LockMandateLineage(hash)
		return s.Apply(ctx, w)
	}
	// Another agent's decision on the same account goes ahead meanwhile.
	if err := write(theirs.Hash); err != nil {
		t.Fatalf("a write under another agent's mandate while the lineage's turn is held: %v", err)
	}
	// One under the newer mandate waits for the turn, behind the holder.
	done := make(chan error, 1)
	go func() { done <- write(newer.Hash) }()
	waiting := wait.Until(20*time.Second, func() bool {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&n)
		return err == nil && n == 1
	})
	if !waiting {
		select {
		case err := <-done:
			t.Fatalf("a write under the newer mandate did not wait for the older one's turn (it ended: %v)", err)
		default:
			t.Fatal("no write under the newer mandate is seen waiting for the older one's turn")
		}
	}
	if err := holding.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the newer mandate's write after the turn was released: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the newer mandate's write did not end after the turn was released")
	}
}
