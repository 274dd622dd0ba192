package ledger

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

// TestAnAppliedAnswerOutweighsAnAbsentListing: the rail's "applied" for
// the attempt being reconciled arrives after its lease expired (kept on
// the attempt, no state change); a listing that then misses the entity
// does not settle the intent as not applied (which would void its hold
// and allow a retry of an action the rail applied): it is quarantined, and
// the database refuses CONFIRMED_NOT_APPLIED whatever the writer.
func TestAnAppliedAnswerOutweighsAnAbsentListing(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p := proposal(41)
	if _, err := startFirst(ctx, s, p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "timeout"}); err != nil {
		t.Fatal(err)
	}
	work, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &p.Key)
	if err != nil || len(work) != 1 {
		t.Fatalf("claim = %+v, %v", work, err)
	}
	// The rail's answer, late: kept on the attempt, the intent stays with
	// its reconciler.
	it, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_late",
		Response: &HTTPMessage{Status: 200, Body: []byte(`{"id":"re_late"}`)}})
	if err != nil || it.State != intent.Reconciling {
		t.Fatalf("late applied = %+v, %v", it, err)
	}

	// The database refuses the state outright, even with an exhaustive
	// finding in place.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a failing check must not leave the intent locked
	if _, err := tx.Exec(ctx, `INSERT INTO reconciliation_findings (rail_account, sik, attempt_seq, outcome, pages, pagination_exhausted)
		VALUES ($1, $2, 1, 'confirmed_absent', 1, true)`, p.RailAccount, p.SIK); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `UPDATE intents SET state = 'CONFIRMED_NOT_APPLIED', last_event = 'CONFIRMED_ABSENT' WHERE rail_account = $1 AND sik = $2`, p.RailAccount, p.SIK)
	if err == nil || !strings.Contains(err.Error(), "answered attempt 1 applied (entity re_late)") {
		t.Fatalf("CONFIRMED_NOT_APPLIED over an applied answer: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	it, err = s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 1, Outcome: FindingAbsent, Pages: 2, PaginationExhausted: true, Owner: "rec"})
	if err != nil || it.State != intent.Quarantined || !strings.Contains(it.Reason, "re_late") {
		t.Fatalf("absent finding over an applied answer = %+v, %v; want QUARANTINED naming re_late", it, err)
	}
	// Without an answer, the same finding proves absence, as before.
	q := proposal(42)
	if _, err := startFirst(ctx, s, q); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, AttemptResult{Key: q.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "timeout"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &q.Key); err != nil {
		t.Fatal(err)
	}
	if it, err := s.RecordFinding(ctx, Finding{Key: q.Key, AttemptSeq: 1, Outcome: FindingAbsent, Pages: 2, PaginationExhausted: true, Owner: "rec"}); err != nil || it.State != intent.ConfirmedNotApplied {
		t.Fatalf("absent finding = %+v, %v", it, err)
	}
}

// TestOnlyAnAttemptAListingCanShowIsProvenAbsent: a listing shows only
// the body stamp, so CONFIRMED_NOT_APPLIED (which voids the hold and lets
// the action be sent again) needs an attempt that either left stamped or,
// through Envoy, was never let leave. The database refuses it, whatever the
// writer, for an attempt ext_proc let leave unstamped (MarkSent(false)) and
// for a native attempt whose caller never said it carried the stamp; the
// intent stays with its reconciler. A mark is never undone.
func TestOnlyAnAttemptAListingCanShowIsProvenAbsent(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	cases := []struct {
		name     string
		viaEnvoy bool
		sent     *bool // MarkSent's stamped, nil: never marked
		reported bool  // the native caller's commit says it carried the stamp
		provable bool
	}{
		{"through Envoy, never let leave", true, nil, false, true},
		{"through Envoy, left stamped", true, ptr(true), false, true},
		{"through Envoy, left unstamped", true, ptr(false), false, false},
		{"native, stamp not confirmed", false, nil, false, false},
		{"native, stamp confirmed", false, nil, true, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := proposal(700 + i)
			p.ViaEnvoy = tc.viaEnvoy
			if _, err := startFirst(ctx, s, p); err != nil {
				t.Fatal(err)
			}
			if tc.sent != nil {
				if _, err := s.MarkSent(ctx, p.Key, 1, *tc.sent, 0); err != nil {
					t.Fatal(err)
				}
				if _, err := s.MarkSent(ctx, p.Key, 1, !*tc.sent, 0); err == nil {
					t.Fatal("an attempt marked sent one way was marked the other")
				}
			}
			if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "timeout", BodyStamped: tc.reported}); err != nil {
				t.Fatal(err)
			}
			_, ats, err := s.GetIntent(ctx, p.Key)
			if err != nil || len(ats) != 1 || ats[0].LeftUnstamped != (tc.sent != nil && !*tc.sent) ||
				ats[0].BodyStamped != (tc.reported || tc.sent != nil && *tc.sent) {
				t.Fatalf("attempts = %+v, %v", ats, err)
			}
			if _, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &p.Key); err != nil {
				t.Fatal(err)
			}
			it, err := s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 1, Outcome: FindingAbsent, Pages: 1, PaginationExhausted: true, Owner: "rec"})
			switch {
			case tc.provable && (err != nil || it.State != intent.ConfirmedNotApplied):
				t.Fatalf("absent finding = %s, %v; want CONFIRMED_NOT_APPLIED", it.State, err)
			case !tc.provable && (err == nil || !strings.Contains(err.Error(), "without its body stamp")):
				t.Fatalf("absent finding = %s, %v; want the database to refuse it", it.State, err)
			}
			if !tc.provable {
				if it, err := s.Intent(ctx, p.Key); err != nil || it.State != intent.Reconciling {
					t.Fatalf("after the refused finding the intent is %s, %v; want it still RECONCILING", it.State, err)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestOnlyAnAttemptThatNeverLeftIsAbsentWithoutAListing: a finding that
// an attempt never left (no page read) is accepted only for an attempt
// through Envoy that ext_proc never marked sent and that is no longer
// pending; for any other the database refuses it and the intent stays
// RECONCILING.
func TestOnlyAnAttemptThatNeverLeftIsAbsentWithoutAListing(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	cases := []struct {
		name     string
		viaEnvoy bool
		sent     *bool // MarkSent's stamped, nil: never marked
		reported bool  // the native caller's commit says it carried the stamp
		ok       bool
	}{
		{"through Envoy, never let leave", true, nil, false, true},
		{"through Envoy, left stamped", true, ptr(true), false, false},
		{"through Envoy, left unstamped", true, ptr(false), false, false},
		{"native, stamp confirmed", false, nil, true, false},
		{"native, stamp not confirmed", false, nil, false, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := proposal(760 + i)
			p.ViaEnvoy = tc.viaEnvoy
			toReconciling(ctx, t, s, p, tc.sent, tc.reported)
			it, err := s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 1, Outcome: FindingAbsent, PaginationExhausted: true, NeverSent: true, Owner: "rec"})
			switch {
			case tc.ok && (err != nil || it.State != intent.ConfirmedNotApplied):
				t.Fatalf("never-sent finding = %s, %v; want CONFIRMED_NOT_APPLIED", it.State, err)
			case !tc.ok && (err == nil || !strings.Contains(err.Error(), "never_sent")):
				t.Fatalf("never-sent finding = %s, %v; want the database to refuse it", it.State, err)
			}
			if !tc.ok {
				if it, err := s.Intent(ctx, p.Key); err != nil || it.State != intent.Reconciling {
					t.Fatalf("after the refused finding the intent is %s, %v; want it still RECONCILING", it.State, err)
				}
			}
		})
	}
	// A retry under the stamp of an attempt that left and was proven absent
	// by a listing: it never left, but a listing may still show the first
	// one's entity (a listing behind the rail), so it is listed again.
	p := proposal(785)
	p.ViaEnvoy = true
	toReconciling(ctx, t, s, p, ptr(true), false)
	if it, err := s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 1, Outcome: FindingAbsent, Pages: 2, PaginationExhausted: true, Owner: "rec"}); err != nil || it.State != intent.ConfirmedNotApplied {
		t.Fatalf("the first attempt's listed absence = %s, %v", it.State, err)
	}
	if err := s.InTx(ctx, func(tx *Tx) error {
		it, err := tx.LockIntent(ctx, p.Key)
		if err != nil {
			return err
		}
		if it, err = tx.Transition(ctx, it, intent.RetryAuthorized, TransitionOpts{Reason: "retry"}); err != nil {
			return err
		}
		_, _, err = tx.StartAttempt(ctx, it, p.AttemptStart)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 2, Outcome: OutcomeAmbiguous, Reason: "stopped"}); err != nil {
		t.Fatal(err)
	}
	work, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &p.Key)
	if err != nil || len(work) != 1 || work[0].Attempt.Seq != 2 || !work[0].EarlierMayHaveLeft {
		t.Fatalf("claimed %+v, %v; want attempt 2, with an earlier attempt under its stamp that may have left", work, err)
	}
	if _, err := s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 2, Outcome: FindingAbsent, PaginationExhausted: true, NeverSent: true, Owner: "rec"}); err == nil || !strings.Contains(err.Error(), "never_sent") {
		t.Fatalf("never-sent finding for the retry = %v; want the database to refuse it", err)
	}

	// Absence with no page and no claim that the attempt never left is
	// still refused.
	p = proposal(790)
	p.ViaEnvoy = true
	toReconciling(ctx, t, s, p, nil, false)
	if _, err := s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 1, Outcome: FindingAbsent, PaginationExhausted: true, Owner: "rec"}); err == nil {
		t.Fatal("an absence read on no page was accepted")
	}
}

// toReconciling starts p's first attempt, marks it sent as sent says (nil:
// never), loses its answer (reported: the native caller says it carried
// the stamp) and claims the intent for the reconciler "rec".
func toReconciling(ctx context.Context, t *testing.T, s *Store, p testProposal, sent *bool, reported bool) {
	t.Helper()
	if _, err := startFirst(ctx, s, p); err != nil {
		t.Fatal(err)
	}
	if sent != nil {
		if _, err := s.MarkSent(ctx, p.Key, 1, *sent, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "timeout", BodyStamped: reported}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &p.Key); err != nil {
		t.Fatal(err)
	}
}
