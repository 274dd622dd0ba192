package ledger

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/intent"
)

// ErrCommitRefused means a reported commit is not bound to the intent's
// latest attempt: its commit token is missing, wrong, of an older attempt
// or of an attempt that has none (one Envoy sent, which only ext_proc
// reports).
var ErrCommitRefused = errors.New("ledger: commit refused")

// Reporter is a caller that reports a rail answer through the native
// Commit RPC: the agent it authenticated as and the SHA-256 of the commit
// token it presented. An AttemptResult without one comes from the trusted
// response path (ext_proc on the Envoy listener).
type Reporter struct {
	AgentID   string
	TokenHash [32]byte
}

// checkReporter admits a reported commit only for the intent's latest
// attempt, from the agent its commit token was issued to (the intent's
// own agent, or a sibling that retried it), with that token. A caller that
// is neither the intent's agent nor the attempt's is told the intent does
// not exist.
func (tx *Tx) checkReporter(ctx context.Context, it Intent, r AttemptResult) error {
	_, err := reporterRefusal(ctx, tx.tx, it, r)
	return err
}

// CheckReporter is checkReporter on the intent as it is now, without its
// lock: the native Commit runs it before anything it would do for a
// reported answer (a read of the rail's listing among them), and Commit
// checks again under the lock. It returns the intent and the attempt's
// stamp (the body stamp the caller was given).
func (s *Store) CheckReporter(ctx context.Context, r AttemptResult) (Intent, string, error) {
	it, err := s.Intent(ctx, r.Key)
	if err != nil {
		return Intent{}, "", err
	}
	if r.ReportedBy == nil {
		return Intent{}, "", errors.New("ledger: CheckReporter of an answer with no reporter")
	}
	stamp, err := reporterRefusal(ctx, s.pool, it, r)
	if err != nil {
		return Intent{}, "", classify(err)
	}
	return it, stamp, nil
}

// reporterRefusal is why r's reporter may not report it (nil if it may),
// and the attempt's stamp.
func reporterRefusal(ctx context.Context, q rowQuerier, it Intent, r AttemptResult) (string, error) {
	var stored []byte
	var holder *string
	var stamp string
	err := q.QueryRow(ctx, `SELECT commit_token_hash, commit_agent, stamp FROM attempts
		WHERE rail_account = $1 AND sik = $2 AND attempt_seq = $3`, r.RailAccount, r.SIK, r.Seq).Scan(&stored, &holder, &stamp)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", err
	}
	agent := r.ReportedBy.AgentID
	ownAttempt := holder != nil && *holder == agent
	if !ownAttempt && (it.AgentID == "" || it.AgentID != agent) {
		return "", notFoundIntent(r.Key)
	}
	switch {
	case r.Seq != it.AttemptCount:
		return "", fmt.Errorf("%w: attempt %d is not the latest attempt (%d) of intent %s", ErrCommitRefused, r.Seq, it.AttemptCount, r.Key)
	case !found:
		return "", fmt.Errorf("%w: intent %s has no attempt %d", ErrCommitRefused, r.Key, r.Seq)
	case len(stored) != len(r.ReportedBy.TokenHash):
		return "", fmt.Errorf("%w: attempt %d of intent %s is reported only by the proxy that sent it", ErrCommitRefused, r.Seq, r.Key)
	case holder != nil && !ownAttempt:
		return "", fmt.Errorf("%w: attempt %d of intent %s was issued to another agent, which alone reports it", ErrCommitRefused, r.Seq, r.Key)
	case subtle.ConstantTimeCompare(stored, r.ReportedBy.TokenHash[:]) != 1:
		return "", fmt.Errorf("%w: the commit token is not the one issued with attempt %d of intent %s", ErrCommitRefused, r.Seq, r.Key)
	}
	return stamp, nil
}

// notFoundIntent is the one answer for an intent that does not exist and
// for one the caller may not see: the two must not be told apart.
func notFoundIntent(k Key) error { return fmt.Errorf("%w: intent %s", ErrNotFound, k) }

// NotFoundIntent is notFoundIntent for callers outside the ledger that
// refuse to show an intent (another agent's).
func NotFoundIntent(k Key) error { return notFoundIntent(k) }

// reportedRefusal records a definite refusal that a caller reported (a
// rejection, or a fingerprint mismatch, which from the rail itself would
// quarantine the intent).
// The caller's word does not prove the attempt had no effect (the real
// request may still be at the rail), and a proven-not-applied state would
// let the action be sent again: the intent goes to reconciliation, which
// settles it from the rail's own listing.
//
// The reason names no word of the rejection: it is text the caller chose
// (the body it reports), and an intent's reason is shown to every agent of
// its owner that sends the same request. The answer stays on the attempt.
func (tx *Tx) reportedRefusal(ctx context.Context, it Intent, r AttemptResult) (Intent, error) {
	delay := r.ReconcileDelay
	return tx.transition(ctx, it, intent.RailAmbiguous, transitionOpts{
		reason:         "the caller reported a definite rejection; reconciliation confirms it from the rail before any new attempt",
		attemptOutcome: "ambiguous", reconcileIn: &delay})
}

// lateApplied handles a rail "applied" for an attempt that is not the
// intent's live one. If the ledger already settled the intent as not
// applied, or started a newer attempt since, the answer contradicts it: two
// attempts may both have applied, or one the ledger would re-send did. The
// intent is quarantined for a person, never sent again. An applied answer
// to the attempt being reconciled (lease expired, then the answer came) is
// no contradiction: it is kept on the attempt and the reconciler finds it.
func (tx *Tx) lateApplied(ctx context.Context, it Intent, r AttemptResult) (Intent, error) {
	newer := it.AttemptCount > r.Seq
	reason := fmt.Sprintf("the rail reported attempt %d applied (entity %q) after the intent was settled as %s at attempt %d; check the rail before resolving",
		r.Seq, r.EntityID, it.State, it.AttemptCount)
	// Attempts of one stamp are one request to the rail, which applies it
	// at most once (a retry after a proof of absence keeps the stamp): the
	// live attempt's hold stands for the late one's money too. Attempts of
	// different stamps may both have applied.
	alongside := false
	if newer {
		var err error
		if alongside, err = tx.stampsDiffer(ctx, it.Key, r.Seq, it.AttemptCount); err != nil {
			return it, err
		}
		reason = fmt.Sprintf("the rail reported attempt %d applied (entity %q) after attempt %d was sent in its place (%s), under the same stamp, so the rail applies only one of them; check the rail before resolving",
			r.Seq, r.EntityID, it.AttemptCount, it.State)
		if alongside {
			reason = fmt.Sprintf("the rail reported attempt %d applied (entity %q) after attempt %d was sent in its place (%s) under a new stamp: both may have applied; check the rail before resolving",
				r.Seq, r.EntityID, it.AttemptCount, it.State)
		}
	}
	if it.State == intent.Blocked {
		// Settled as not applied and then blocked (the owner resolved it
		// not applied, or rejected its retry), and the rail now says an
		// attempt applied. BLOCKED is absorbing, so the intent stays; the
		// money that left is held again (past the budget if need be), so
		// the budget counts it, and the answer stays on the attempt, where
		// the owner's timeline shows it.
		_, err := tx.holdAgain(ctx, it.Key, false)
		return it, err
	}
	switch {
	case it.State == intent.FailedTerminal, it.State == intent.ConfirmedNotApplied:
	case newer && it.State == intent.InFlight:
		// IN_FLIGHT has no QUARANTINE edge: the live attempt's outcome is
		// now ambiguous, then the intent is quarantined.
		delay := r.ReconcileDelay
		var err error
		if it, err = tx.transition(ctx, it, intent.RailAmbiguous, transitionOpts{
			reason: reason, attemptOutcome: "ambiguous", reconcileIn: &delay}); err != nil {
			return it, err
		}
	case newer && (it.State == intent.Unknown || it.State == intent.Reconciling || it.State == intent.Authorized):
	default:
		return it, nil
	}
	held, err := tx.holdAgain(ctx, it.Key, alongside)
	if err != nil {
		return it, err
	}
	return tx.transition(ctx, it, intent.Quarantine, transitionOpts{reason: reason + held})
}

// stampsDiffer says whether attempts a and b of k carry different stamps.
func (tx *Tx) stampsDiffer(ctx context.Context, k Key, a, b int) (bool, error) {
	var differ bool
	err := tx.tx.QueryRow(ctx, `SELECT count(DISTINCT stamp) > 1 FROM attempts WHERE rail_account = $1 AND sik = $2 AND attempt_seq IN ($3, $4)`,
		k.RailAccount, k.SIK, a, b).Scan(&differ)
	return differ, err
}

// holdAgain re-places the hold of an intent whose every hold was voided
// (it was settled as not applied) but that the rail says applied: money
// that left counts against the mandate again while a person looks. The new
// hold copies the voided one and counts in the windows at once (a held hold
// always does). It is reserved in the budget even if the budget was taken
// since: the rail's answer must be recorded whatever it costs, and the
// money did leave. Such a hold alone may take the reservation past the
// budget (beyond_budget, migration 00026); while it is past, no other hold
// fits, and voided holds give back only what is left over. The returned
// text, for the quarantine's reason, says by how much the budget is
// overrun, if at all. alongside is for an answer to an attempt that a
// newer one of another stamp replaced: the newer attempt's hold stands for
// the newer attempt's money, and the late one's is placed again beside it
// (both may have applied); otherwise only an intent whose every hold was
// voided gets one.
func (tx *Tx) holdAgain(ctx context.Context, k Key, alongside bool) (string, error) {
	var amount, overrun int64
	var currency string
	var budgeted bool
	err := tx.tx.QueryRow(ctx, `
		INSERT INTO budget_holds (rail_account, sik, hold_seq, mandate_hash, agent_id, payee_key, subject, currency, amount_minor, budgeted,
		                          window_agent, window_payee, created_at, beyond_budget)
		SELECT rail_account, sik, (SELECT max(hold_seq) + 1 FROM budget_holds WHERE rail_account = $1 AND sik = $2),
		       mandate_hash, agent_id, payee_key, subject, currency, amount_minor, budgeted, window_agent, window_payee, created_at, true
		FROM budget_holds h
		WHERE h.rail_account = $1 AND h.sik = $2 AND h.state = 'voided'
		  AND ($3 OR NOT EXISTS (SELECT 1 FROM budget_holds o WHERE o.rail_account = $1 AND o.sik = $2 AND o.state <> 'voided'))
		ORDER BY h.hold_seq DESC LIMIT 1
		RETURNING amount_minor, currency, budgeted`,
		k.RailAccount, k.SIK, alongside).Scan(&amount, &currency, &budgeted)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// No hold, or one still held or posted: nothing was given back.
		return "", nil
	case err != nil:
		return "", err
	}
	if budgeted {
		if err := tx.tx.QueryRow(ctx, `SELECT b.overrun_minor FROM mandate_budgets b JOIN budget_holds h
			ON b.mandate_hash = h.mandate_hash AND b.currency = h.currency
			WHERE h.rail_account = $1 AND h.sik = $2 AND h.beyond_budget AND h.state = 'held'`, k.RailAccount, k.SIK).Scan(&overrun); err != nil {
			return "", err
		}
	}
	if overrun > 0 {
		return fmt.Sprintf("; its voided hold of %d %s is held again, though the budget was taken since: the mandate's budget is overrun by %d %s, and no new hold fits until that much is given back",
			amount, currency, overrun, currency), nil
	}
	return fmt.Sprintf("; its voided hold of %d %s is held again", amount, currency), nil
}
