package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/countersign/countersign/internal/intent"
)

// RailOutcome is the classified answer of the rail to one attempt.
type RailOutcome string

// Rail outcomes (DESIGN.md §4).
const (
	OutcomeApplied             RailOutcome = "applied"
	OutcomeInProgress          RailOutcome = "in_progress"
	OutcomeFingerprintMismatch RailOutcome = "fingerprint_mismatch"
	OutcomeRejected            RailOutcome = "rejected"
	OutcomeAmbiguous           RailOutcome = "ambiguous"
)

// AttemptResult is what Commit records for an attempt.
type AttemptResult struct {
	Key
	Seq            int
	Outcome        RailOutcome
	Response       *HTTPMessage // nil when no response arrived
	TransportError string
	// BodyStamped says the request that went out carried the body stamp.
	BodyStamped bool
	EntityID    string
	FeeMinor    int64
	Reason      string
	// ReconcileDelay is the wait before the first reconciliation query of
	// an ambiguous outcome.
	ReconcileDelay time.Duration
	// ReportedBy is the caller that reported this answer through the native
	// Commit RPC; nil for the trusted response path (ext_proc).
	ReportedBy *Reporter
	// Seen is the intent as the caller read it before classifying the
	// answer. When it is IN_FLIGHT on this attempt and the answer is the
	// trusted path's, Commit writes in one pipelined round trip that
	// asserts the intent still is; otherwise (or if it moved) it takes the
	// intent's lock first.
	Seen *Intent
}

// Commit records the rail's answer to an attempt and moves the intent.
// A late answer (the intent already moved on, e.g. its lease expired) is
// kept on the attempt for the reconciler and changes no state, unless it
// is an "applied" that contradicts how the intent was settled (see
// lateApplied). Committing the same answer twice is harmless. A reported
// answer (r.ReportedBy) is admitted only from the intent's agent with the
// latest attempt's commit token, and its definite rejection goes to
// reconciliation instead of FAILED_TERMINAL.
func (s *Store) Commit(ctx context.Context, r AttemptResult) (Intent, error) {
	if w, out, ok := seenCommit(r); ok {
		err := s.apply(ctx, OpCommitBatch, w)
		var guard *GuardError
		switch {
		case err == nil:
			return *out, nil
		case !errors.As(err, &guard) && !isCheckViolation(err):
			return Intent{}, fmt.Errorf("ledger: commit %s#%d: %w", r.Key, r.Seq, err)
		}
		// The intent moved since it was read: decide under its lock.
	}
	var out Intent
	err := s.inTx(ctx, OpCommit, func(tx *Tx) error {
		it, err := tx.lockIntent(ctx, r.Key)
		if err != nil {
			return err
		}
		if r.ReportedBy != nil {
			if err := tx.checkReporter(ctx, it, r); err != nil {
				return err
			}
		}
		if err := tx.recordResponse(ctx, r); err != nil {
			return err
		}
		out = it
		if it.State != intent.InFlight || it.AttemptCount != r.Seq {
			if r.Outcome == OutcomeApplied {
				out, err = tx.lateApplied(ctx, it, r)
			}
			return err
		}
		switch r.Outcome {
		case OutcomeApplied:
			if r.EntityID == "" {
				return fmt.Errorf("applied outcome without an entity id")
			}
			out, err = tx.transition(ctx, it, intent.RailApplied, transitionOpts{
				reason: "applied by the rail", attemptOutcome: "applied", entityID: r.EntityID})
		case OutcomeRejected:
			if r.ReportedBy != nil {
				out, err = tx.reportedRefusal(ctx, it, r)
				break
			}
			out, err = tx.transition(ctx, it, intent.RailRejected, transitionOpts{
				reason: r.Reason, attemptOutcome: "rejected"})
		case OutcomeAmbiguous:
			delay := r.ReconcileDelay
			out, err = tx.transition(ctx, it, intent.RailAmbiguous, transitionOpts{
				reason: r.Reason, attemptOutcome: "ambiguous", reconcileIn: &delay})
		case OutcomeFingerprintMismatch:
			if r.ReportedBy != nil {
				// The caller's word: a person is asked only on the rail's.
				out, err = tx.reportedRefusal(ctx, it, r)
				break
			}
			// Our fingerprint drifted: a bug. The keyed request may still
			// have applied, so the intent is held for a person, never
			// retried under a rotated key.
			delay := r.ReconcileDelay
			if it, err = tx.transition(ctx, it, intent.RailAmbiguous, transitionOpts{
				reason: r.Reason, attemptOutcome: "fingerprint_mismatch", reconcileIn: &delay}); err != nil {
				return err
			}
			out, err = tx.transition(ctx, it, intent.Quarantine, transitionOpts{
				reason: "rail reports a different request under the same idempotency key: " + r.Reason})
		case OutcomeInProgress:
			// The same key is still running at the rail: stay IN_FLIGHT.
			_, err = tx.tx.Exec(ctx, `UPDATE attempts SET outcome = 'in_progress'
				WHERE rail_account = $1 AND sik = $2 AND attempt_seq = $3 AND outcome = 'pending'`,
				r.RailAccount, r.SIK, r.Seq)
		default:
			err = fmt.Errorf("unknown rail outcome %q", r.Outcome)
		}
		return err
	})
	if err != nil {
		return Intent{}, classify(fmt.Errorf("ledger: commit %s#%d: %w", r.Key, r.Seq, err))
	}
	return out, nil
}

// seenCommit is the one-round-trip commit of an answer from the trusted
// path to the attempt r.Seen is IN_FLIGHT on, for the outcomes that only
// move that intent along one edge; ok is false otherwise. Its first
// statement locks the intent and asserts it is still as seen, so the
// writes that follow are the ones the locking commit would make.
func seenCommit(r AttemptResult) (*Write, *Intent, bool) {
	it := r.Seen
	if it == nil || r.ReportedBy != nil || it.State != intent.InFlight || it.AttemptCount != r.Seq {
		return nil, nil, false
	}
	var ev intent.Event
	o := transitionOpts{reason: r.Reason}
	switch r.Outcome {
	case OutcomeApplied:
		if r.EntityID == "" {
			return nil, nil, false
		}
		ev, o.reason, o.attemptOutcome, o.entityID = intent.RailApplied, "applied by the rail", "applied", r.EntityID
	case OutcomeRejected:
		ev, o.attemptOutcome = intent.RailRejected, "rejected"
	case OutcomeAmbiguous:
		delay := r.ReconcileDelay
		ev, o.attemptOutcome, o.reconcileIn = intent.RailAmbiguous, "ambiguous", &delay
	default:
		return nil, nil, false
	}
	sql, args, err := transitionStatement(*it, ev, o)
	if err != nil {
		return nil, nil, false
	}
	// The answer and the attempt's settlement in one statement (the
	// answer's entity is the one an applied settlement names).
	respSQL, respArgs, err := answerStatement(r, o.attemptOutcome)
	if err != nil {
		return nil, nil, false
	}
	w := NewWrite()
	w.assert(`(SELECT count(*) = 1 FROM (
		SELECT 1 FROM intents WHERE rail_account = $1 AND sik = $2 AND state = 'IN_FLIGHT' AND attempt_count = $3
		FOR UPDATE) seen)`, `the intent moved since it was read`, r.RailAccount, r.SIK, r.Seq)
	w.queue(`WITH answered AS (`+respSQL+` RETURNING 1)
		SELECT countersign_assert(count(*) = 1, 'the attempt does not exist') FROM answered`, respArgs...)
	out := &Intent{}
	w.queue(sql, args...).QueryRow(scanInto(out))
	return w, out, true
}

func (tx *Tx) recordResponse(ctx context.Context, r AttemptResult) error {
	sql, args, err := responseStatement(r)
	if err != nil {
		return err
	}
	tag, err := tx.tx.Exec(ctx, sql, args...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: attempt %s#%d", ErrNotFound, r.Key, r.Seq)
	}
	return nil
}

// responseStatement is the UPDATE that keeps the rail's answer on its
// attempt (whatever the intent's state: a late answer is kept for the
// reconciler). Once the attempt is settled its answer stays (answerOpen):
// a later report (a native caller's, whose token outlives the settling)
// must not rewrite what is replayed to a duplicate.
// answerOpen says, in an UPDATE of attempts (old values), whether a
// response may still be written: none is kept yet, or the attempt is
// unanswered or still in progress at the rail (a 409 "in progress" is
// followed by the real answer). $4 is the new response's status.
const answerOpen = `(response_status IS NULL OR ($4::integer IS NOT NULL AND outcome IN ('pending', 'in_progress')))`

func responseStatement(r AttemptResult) (string, []any, error) {
	return answerStatement(r, "")
}

// answerStatement is responseStatement that, when outcome is not "", also
// settles the attempt as settleAttemptSQL would (an unsettled attempt
// only): one statement and one guard-trigger call instead of two. (The
// WAL is about the same either way: PostgreSQL logs a second update of a
// row on its page as the bytes that changed.)
func answerStatement(r AttemptResult, outcome string) (string, []any, error) {
	var status any
	var headers []byte
	var body []byte
	if r.Response != nil {
		status = r.Response.Status
		var err error
		if headers, err = json.Marshal(r.Response.Headers); err != nil {
			return "", nil, err
		}
		body = r.Response.Body
	}
	var fee any
	if r.FeeMinor > 0 {
		fee = r.FeeMinor
	}
	args := []any{r.RailAccount, r.SIK, r.Seq, status, headers, body, r.TransportError, r.EntityID, fee, r.BodyStamped}
	settle := ""
	if outcome != "" {
		settle = `,
		       outcome = CASE WHEN outcome IN ` + unsettledOutcomes + ` THEN $11 ELSE outcome END`
		args = append(args, outcome)
	}
	return `
		UPDATE attempts SET response_status = CASE WHEN ` + answerOpen + ` THEN COALESCE($4, response_status) ELSE response_status END,
		       response_headers = CASE WHEN ` + answerOpen + ` THEN COALESCE($5, response_headers) ELSE response_headers END,
		       response_body = CASE WHEN ` + answerOpen + ` THEN COALESCE($6, response_body) ELSE response_body END,
		       transport_error = CASE WHEN response_status IS NULL THEN COALESCE(transport_error, NULLIF($7, '')) ELSE transport_error END,
		       body_stamped = body_stamped OR $10,
		       entity_id = COALESCE(entity_id, NULLIF($8, '')),
		       fee_minor = COALESCE(fee_minor, $9),
		       finished_at = COALESCE(finished_at, now())` + settle + `
		WHERE rail_account = $1 AND sik = $2 AND attempt_seq = $3`, args, nil
}

// ExpireLeases turns every IN_FLIGHT intent whose attempt lease has expired
// into UNKNOWN (LEASE_EXPIRED), to be reconciled after delay. It is run at
// boot and periodically; SKIP LOCKED lets several processes share it. It is
// ExpireLeasesIn over every owner's intents.
func (s *Store) ExpireLeases(ctx context.Context, limit int, delay time.Duration) (int, error) {
	return s.ExpireLeasesIn(ctx, limit, delay, ReconcileScope{})
}

// MarkSent records, before the request may leave through Envoy, whether
// its body carries the stamp (ext_proc calls it as it writes the stamp, or
// lets a request with no place for one go): stamped, a listing can show
// the attempt absent; not, none can (LeftUnstamped), and reconciliation
// never settles it as not applied. A mark is never undone: an attempt let
// go both ways is refused (attempts_stamped_or_not) and stopped. Only the
// live attempt may leave: its intent IN_FLIGHT on this very attempt, the
// attempt unanswered and its lease unexpired. An attempt whose lease
// lapsed may already have been proven absent and retried; letting it go
// now would be a second rail effect (ErrAttemptNotLive, and ext_proc
// stops the request). The lease expiry writes the attempt row too, so the
// two serialise on it. It returns the intent as the mark found it, which
// the commit of the attempt's answer may start from (AttemptResult.Seen)
// instead of reading it again. The rail may apply the request until
// mayApplyFor from now (the rail call's timeout and what the rail takes
// after its client gave up): no listing before then proves it absent
// (migration 00034).
func (s *Store) MarkSent(ctx context.Context, k Key, seq int, stamped bool, mayApplyFor time.Duration) (Intent, error) {
	it, err := scanIntent(s.pool.QueryRow(ctx, `WITH marked AS (
		UPDATE attempts a SET body_stamped = a.body_stamped OR $4, left_unstamped = a.left_unstamped OR NOT $4,
		       may_apply_until = GREATEST(a.may_apply_until, now() + $5::bigint * interval '1 microsecond')
		FROM intents i
		WHERE a.rail_account = $1 AND a.sik = $2 AND a.attempt_seq = $3
		  AND a.outcome = 'pending' AND a.lease_expires_at > now()
		  AND i.rail_account = a.rail_account AND i.sik = a.sik
		  AND i.state = 'IN_FLIGHT' AND i.attempt_count = a.attempt_seq
		RETURNING 1)
		SELECT `+intentColumns+` FROM intents WHERE rail_account = $1 AND sik = $2 AND EXISTS (SELECT 1 FROM marked)`,
		k.RailAccount, k.SIK, seq, stamped, mayApplyFor.Microseconds()))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Intent{}, fmt.Errorf("%w: attempt %s#%d", ErrAttemptNotLive, k, seq)
	case err != nil:
		return Intent{}, classify(err)
	}
	return it, nil
}

// isCheckViolation: the database refused a write as the state machine or a
// constraint forbids (the row moved under a write that assumed it had not).
func isCheckViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514"
}
