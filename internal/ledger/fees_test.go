package ledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

// TestFeeCountsOnceKnownWhateverSettledIt: a fee the rail reports on an
// action that applied counts once in the mandate's fee rows (the fee
// budget), whichever path settled the action: the answer in time; the
// reconciler's listing (which carries no fee) and then the answer, late;
// an "applied" after the intent was settled not applied (quarantined, the
// hold placed again). Only the first counted before migration 00031: an
// agent that reset its connection once its request had left spent past
// the fee budget (an attacker's-eye review's finding). The same answer
// again counts nothing more.
func TestFeeCountsOnceKnownWhateverSettledIt(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	mandate := fmt.Sprintf("%064x", 91)
	fee := func() int64 {
		var f int64
		if err := s.InTx(ctx, func(tx *Tx) (err error) { f, err = tx.FeeSpent(ctx, mandate); return err }); err != nil {
			t.Fatal(err)
		}
		return f
	}
	start := func(n int) testProposal {
		p := proposal(n)
		res, err := startFirst(ctx, s, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.InTx(ctx, func(tx *Tx) error {
			return tx.PlaceHold(ctx, res.Intent, HoldSpec{MandateHash: mandate, AgentID: "agent_a", PayeeKey: "pi_1", Currency: "USD", AmountMinor: 1000})
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MarkSent(ctx, p.Key, 1, true, 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	applied := func(p testProposal) AttemptResult {
		return AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_" + p.SIK, FeeMinor: 30, BodyStamped: true,
			Response: &HTTPMessage{Status: 200, Body: []byte(`{"id":"re_x"}`)}}
	}

	// Control: the trusted answer in time counts its fee.
	p0 := start(9100)
	if _, err := s.Commit(ctx, applied(p0)); err != nil {
		t.Fatal(err)
	}
	if got := fee(); got != 30 {
		t.Fatalf("control: fee %d, want 30", got)
	}

	// 1. The response never reaches ext_proc (the agent reset its
	// connection after the request left): lease expiry, the reconciler
	// finds the entity. The finding has no fee; then the response, late.
	p1 := start(9101)
	if _, err := s.Commit(ctx, AttemptResult{Key: p1.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "reset", BodyStamped: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &p1.Key); err != nil {
		t.Fatal(err)
	}
	if it, err := s.RecordFinding(ctx, Finding{Key: p1.Key, AttemptSeq: 1, Outcome: FindingApplied, EntityID: "re_" + p1.SIK, Pages: 1, Owner: "rec"}); err != nil || it.State != intent.Applied {
		t.Fatalf("found = %v, %v", it.State, err)
	}
	// Even once the rail's answer (with its fee) reaches the ledger:
	if _, err := s.Commit(ctx, applied(p1)); err != nil {
		t.Fatal(err)
	}
	if got := fee(); got != 60 {
		t.Fatalf("after the late answer of an action the reconciler found applied: fee %d, want 60", got)
	}

	// 2. The applied answer comes after the ledger settled it not applied:
	// quarantined, the hold placed again, but the fee?
	p2 := start(9102)
	if _, err := s.Commit(ctx, AttemptResult{Key: p2.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "timeout", BodyStamped: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &p2.Key); err != nil {
		t.Fatal(err)
	}
	if it, err := s.RecordFinding(ctx, Finding{Key: p2.Key, AttemptSeq: 1, Outcome: FindingAbsent, Pages: 1, PaginationExhausted: true, Owner: "rec"}); err != nil || it.State != intent.ConfirmedNotApplied {
		t.Fatalf("absent = %v, %v", it.State, err)
	}
	if it, err := s.Commit(ctx, applied(p2)); err != nil || it.State != intent.Quarantined {
		t.Fatalf("late applied = %v, %v", it.State, err)
	}
	if got := fee(); got != 90 {
		t.Fatalf("FeeSpent = %d after three applied actions with a fee of 30 each; want 90", got)
	}
	// The same answers again count nothing more.
	for _, p := range []testProposal{p0, p1, p2} {
		if _, err := s.Commit(ctx, applied(p)); err != nil {
			t.Fatal(err)
		}
	}
	if got := fee(); got != 90 {
		t.Fatalf("FeeSpent = %d after the same answers again; want 90", got)
	}
}
