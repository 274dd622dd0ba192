package ledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestCommitPathsTakeTheMandatesRowsInOneOrder: an APPLIED commit made on
// the response path (seenCommit: the attempt settles, counting its fee in
// the mandate's fee row of its SIK's shard, then the intent posts its
// hold, in the spent row of that shard and the windows) and one made under
// the intent's lock (a native caller's confirmed "applied") must take
// those rows in one order. They took them in opposite orders, and two
// commits whose SIKs shared a shard deadlocked (found by an attacker's-eye
// review). Deadlock detection is put out of reach here (a minute), so a
// deadlock shows as commits that do not finish.
func TestCommitPathsTakeTheMandatesRowsInOneOrder(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	setup := openTestURL(t, url)
	if _, err := setup.pool.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET deadlock_timeout = %L', current_database(), '60s'); END $$`); err != nil {
		t.Fatal(err)
	}
	s := openTestURL(t, url) // its connections start with the setting
	mandate := fmt.Sprintf("%064x", 93)
	shard := func(sik string) (n int) {
		if err := s.pool.QueryRow(ctx, `SELECT hashtext($1) & 15`, sik).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := 9300, 9301
	for shard(testSIK(b)) != shard(testSIK(a)) {
		b++
	}
	const token = "cct_order"
	pa := proposal(a)
	ra, err := startFirst(ctx, s, pa)
	if err != nil {
		t.Fatal(err)
	}
	pb, agentB := reportedProposal(t, s, b, token)
	rb, err := s.Intent(ctx, pb.Key)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []struct {
		it    Intent
		agent string
	}{{ra.Intent, "agent_a"}, {rb, "agent_b"}} {
		if err := s.InTx(ctx, func(tx *Tx) error {
			return tx.PlaceHold(ctx, h.it, HoldSpec{MandateHash: mandate, AgentID: h.agent, PayeeKey: "pi_" + h.agent, Currency: "USD", AmountMinor: 1000, BudgetMinor: 100000})
		}); err != nil {
			t.Fatal(err)
		}
	}
	seen, err := s.MarkSent(ctx, pa.Key, 1, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	waiting := func(n int) {
		t.Helper()
		var w int
		if !wait.Until(10*time.Second, func() bool {
			err := setup.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&w)
			return err == nil && w >= n
		}) {
			t.Fatalf("%d transactions wait on a lock after 10s, want %d", w, n)
		}
	}
	// A third transaction holds B's open window row, so that B's commit
	// stops midway, holding what it took first; A's commit then takes its
	// first row and waits for B's.
	t0, err := setup.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = t0.Rollback(ctx) }()
	if _, err := t0.Exec(ctx, `SELECT 1 FROM window_buckets WHERE mandate_hash = $1 AND NOT by_payee AND key = 'agent_b' AND bucket = 'infinity' FOR UPDATE`, mandate); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() {
		_, err := s.Commit(ctx, AttemptResult{Key: pb.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "pout_b", FeeMinor: 10, BodyStamped: true,
			ReportedBy: reporter(agentB, token), Response: &HTTPMessage{Status: 200, Body: []byte(`{"id":"pout_b"}`)}})
		done <- err
	}()
	waiting(1)
	go func() {
		_, err := s.Commit(ctx, AttemptResult{Key: pa.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "pout_a", FeeMinor: 10, BodyStamped: true,
			Seen: &seen, Response: &HTTPMessage{Status: 200, Body: []byte(`{"id":"pout_a"}`)}})
		done <- err
	}()
	waiting(2)
	if err := t0.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(20 * time.Second)
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("commit: %v", err)
			}
		case <-timeout:
			t.Fatal("the two commits did not finish within 20s: they deadlocked on the mandate's fee and spent rows")
		}
	}
	var fee int64
	if err := s.InTx(ctx, func(tx *Tx) (err error) { fee, err = tx.FeeSpent(ctx, mandate); return err }); err != nil || fee != 20 {
		t.Fatalf("FeeSpent = %d, %v; want both fees, 20", fee, err)
	}
	if err := bucketsMatchHolds(ctx, s); err != nil {
		t.Fatal(err)
	}
}
