package ledger

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestTxObserverSeesWritesAndQuarantinedCount: a handle made by
// WithTxObserver reports each write transaction under its operation name
// (the handle it came from reports nothing), and CountQuarantined counts
// exactly the intents in QUARANTINED on the accounts it is given.
func TestTxObserverSeesWritesAndQuarantinedCount(t *testing.T) {
	base := openTest(t)
	ctx := context.Background()
	var mu sync.Mutex
	var ops []string
	s := base.WithTxObserver(func(op string, elapsed time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if elapsed < 0 {
			t.Errorf("%s took %v", op, elapsed)
		}
		if err == nil {
			ops = append(ops, op)
		} else {
			ops = append(ops, op+":error")
		}
	})
	if n, err := s.CountQuarantined(ctx, []string{proposal(40).RailAccount}); err != nil || n != 0 {
		t.Fatalf("CountQuarantined on an empty ledger = %d, %v", n, err)
	}
	for i, outcome := range []RailOutcome{OutcomeFingerprintMismatch, OutcomeAmbiguous} {
		p := proposal(40 + i)
		if _, err := startFirst(ctx, base, p); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: outcome, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.CountQuarantined(ctx, []string{proposal(40).RailAccount}); err != nil || n != 1 {
		t.Fatalf("CountQuarantined = %d, %v; want 1 (the fingerprint mismatch, not the ambiguous one)", n, err)
	}
	// Only the accounts named are counted: a sidecar's /metrics tells
	// nothing of another owner's accounts.
	for _, accounts := range [][]string{nil, {}, {"acct_other"}} {
		if n, err := s.CountQuarantined(ctx, accounts); err != nil || n != 0 {
			t.Fatalf("CountQuarantined(%q) = %d, %v; want 0", accounts, n, err)
		}
	}
	if err := s.InTx(ctx, func(*Tx) error { return errors.New("the script refused") }); err == nil {
		t.Fatal("InTx returned nil for a refusing script")
	}
	if _, err := s.ExpireLeases(ctx, 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{OpEngineTx + ":error", OpExpireLeases} {
		if !slices.Contains(ops, want) {
			t.Errorf("observed %v, want %s among them", ops, want)
		}
	}
	if !slices.Contains(ops, OpCommit) && !slices.Contains(ops, OpCommitBatch) {
		t.Errorf("observed %v, want a commit", ops)
	}
	for _, op := range ops {
		if op == OpEngineTx { // only base ran a committing InTx
			t.Errorf("observed %v: the unobserved handle's writes were reported", ops)
		}
	}
}
