package ledger

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

// TestStampFirstStartedIsTheFirstAttemptUnderTheStamp: the claim names
// when the first of the intent's attempts under the claimed attempt's
// stamp started, which bounds the listing that looks for an entity under
// it (the reconciler's since). A retry after a proven absence keeps the
// stamp, so it keeps the first attempt's bound (that request may reach the
// rail late); a reopen after a definite rejection bumps the stamp's
// generation, and the bound starts again at the first attempt under the
// new stamp. A stamp no attempt carries is ErrNotFound.
func TestStampFirstStartedIsTheFirstAttemptUnderTheStamp(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p := proposal(830)
	if _, err := startFirst(ctx, s, p); err != nil {
		t.Fatal(err)
	}
	// The first request left two hours ago (its started_at moved back, so
	// that no attempt's start can stand in for another's by accident).
	if _, err := s.pool.Exec(ctx, `UPDATE attempts SET started_at = started_at - interval '2 hours'
		WHERE rail_account = $1 AND sik = $2 AND attempt_seq = 1`, p.RailAccount, p.SIK); err != nil {
		t.Fatal(err)
	}
	startedAt := func(seq int) time.Time {
		t.Helper()
		_, atts, err := s.GetIntent(ctx, p.Key)
		if err != nil || len(atts) < seq {
			t.Fatalf("attempts = %+v, %v", atts, err)
		}
		return atts[seq-1].StartedAt
	}
	// claim loses attempt seq's answer, claims the intent and checks the
	// bound the claim names; absent then settles it not applied.
	claim := func(seq int, want time.Time, absent bool) {
		t.Helper()
		if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: seq, Outcome: OutcomeAmbiguous, Reason: "timeout"}); err != nil {
			t.Fatal(err)
		}
		work, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &p.Key)
		if err != nil || len(work) != 1 || work[0].Attempt.Seq != seq {
			t.Fatalf("claimed %+v, %v; want attempt %d", work, err, seq)
		}
		if got := work[0].StampFirstStarted; !got.Equal(want) {
			t.Fatalf("attempt %d under %s: StampFirstStarted = %v, want %v", seq, work[0].Attempt.Stamp, got, want)
		}
		if absent {
			if it, err := s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: seq, Outcome: FindingAbsent, Pages: 1, PaginationExhausted: true, Owner: "rec"}); err != nil || it.State != intent.ConfirmedNotApplied {
				t.Fatalf("absent finding = %s, %v", it.State, err)
			}
		}
	}
	// next starts the intent's next attempt under stamp after ev.
	next := func(ev intent.Event, bump bool, stamp string) {
		t.Helper()
		if err := s.InTx(ctx, func(tx *Tx) error {
			it, err := tx.LockIntent(ctx, p.Key)
			if err != nil {
				return err
			}
			if it, err = tx.Transition(ctx, it, ev, TransitionOpts{Reason: "test", BumpGeneration: bump}); err != nil {
				return err
			}
			st := p.AttemptStart
			st.Stamp = stamp
			_, _, err = tx.StartAttempt(ctx, it, st)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	first := startedAt(1)
	claim(1, first, true)

	// A retry after the proven absence, under the same stamp: the first
	// attempt's start still bounds it.
	next(intent.RetryAuthorized, false, p.Stamp)
	if !startedAt(2).After(first) {
		t.Fatalf("the retry started at %v, not after the first attempt (%v): the test proves nothing", startedAt(2), first)
	}
	claim(2, first, true)

	// A third attempt under the stamp is refused for good; the reopened
	// intent's next attempt carries a new generation's stamp.
	next(intent.RetryAuthorized, false, p.Stamp)
	if it, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 3, Outcome: OutcomeRejected, Reason: "declined",
		Response: &HTTPMessage{Status: 400, Body: []byte(`{"error":{}}`)}}); err != nil || it.State != intent.FailedTerminal {
		t.Fatalf("rejection = %s, %v; want FAILED_TERMINAL", it.State, err)
	}
	next(intent.Reopened, true, p.SIK+"-1")
	claim(4, startedAt(4), false)

	if err := s.InTx(ctx, func(tx *Tx) error {
		_, err := tx.StampFirstStarted(ctx, p.Key, p.SIK+"-2")
		return err
	}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("StampFirstStarted of a stamp no attempt carries = %v, want ErrNotFound", err)
	}
}
