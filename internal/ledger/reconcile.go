package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/inert"
	"github.com/countersign/countersign/internal/intent"
)

// ReconcileWork is one intent claimed by a reconciler, with the attempt to
// look for at the rail.
type ReconcileWork struct {
	Intent  Intent
	Attempt Attempt
	// EarlierMayHaveLeft: an earlier attempt of the intent under the same
	// stamp may have reached the rail (marked sent, or not through Envoy).
	// A retry after a proven absence keeps its stamp, so a listing for
	// this attempt may still find that one's entity, even if this attempt
	// never left (a listing that lagged behind the rail proved it absent).
	EarlierMayHaveLeft bool
	// StampFirstStarted is when the intent's first attempt under this
	// attempt's stamp started, on the database's clock (StampFirstStarted
	// of Tx): no entity under the stamp is older, so it bounds the
	// listing that looks for one.
	StampFirstStarted time.Time
	// RailDone: the rail can no longer apply the attempt, on the
	// database's clock: its may_apply_until (migration 00034) has passed,
	// or, when it has none, its lease has ended. A listing now sees
	// whatever the attempt made, so listing it again later can show no
	// more than this pass's listing does.
	RailDone bool
}

// railDoneSQL is ReconcileWork.RailDone of attempt $3 of intent ($1, $2).
// may_apply_until is NULL for an attempt that left without ext_proc's mark
// while no settle time was configured, and for every attempt made before
// migration 00034: neither proves the rail done. Such a native attempt
// may still be at the rail until its lease ends (the caller holds it that
// long); read as done, an ambiguous one was quarantined after a single
// listing, which said "the rail can no longer apply it" of a request
// perhaps still running there (found by a review). So the lease bounds it
// instead. (An attempt ext_proc never let leave also has none; it is
// settled without reading RailDone.)
const railDoneSQL = `SELECT COALESCE(may_apply_until, lease_expires_at) <= now() FROM attempts
	WHERE rail_account = $1 AND sik = $2 AND attempt_seq = $3`

// earlierMayHaveLeftSQL is ReconcileWork.EarlierMayHaveLeft of attempt $3
// (stamp $4) of intent ($1, $2).
const earlierMayHaveLeftSQL = `SELECT EXISTS (SELECT 1 FROM attempts
	WHERE rail_account = $1 AND sik = $2 AND attempt_seq < $3 AND stamp = $4
	  AND (body_stamped OR left_unstamped OR NOT via_envoy))`

// ReconcileScope narrows what a reconciliation pass expires and claims.
// The zero value is every intent: the reconciler's own pass, which no
// caller starts. An owner's pass (DecisionService.Reconcile) sets OwnerID,
// so that it acts only on what that owner owns (DESIGN.md §1, A1).
type ReconcileScope struct {
	// Only, when set, is the one intent.
	Only *Key
	// OwnerID, when set, restricts the pass to intents of that owner's
	// agents on rail accounts it holds (the grant not revoked).
	OwnerID string
	// RailAccount, when set, restricts the pass to that rail account.
	RailAccount string
}

// inScopeSQL is ReconcileScope as a condition on intents aliased i, with
// its arguments at $2 to $5 (ReconcileScope.args).
const inScopeSQL = `($2::text IS NULL OR (i.rail_account = $2 AND i.sik = $3))
	  AND ($4::text IS NULL OR (i.agent_id IN (SELECT id FROM agents WHERE owner_id = $4)
	       AND i.rail_account IN (SELECT rail_account FROM rail_account_owners WHERE owner_id = $4 AND revoked_at IS NULL)))
	  AND ($5::text IS NULL OR i.rail_account = $5)`

// args are inScopeSQL's arguments; an unset field is NULL, which matches
// every intent.
func (sc ReconcileScope) args() []any {
	var onlyAccount, onlySIK, owner, account any
	if sc.Only != nil {
		onlyAccount, onlySIK = sc.Only.RailAccount, sc.Only.SIK
	}
	if sc.OwnerID != "" {
		owner = sc.OwnerID
	}
	if sc.RailAccount != "" {
		account = sc.RailAccount
	}
	return []any{onlyAccount, onlySIK, owner, account}
}

// reconcileDueSQL: intent i is due for reconciliation and no live
// reconciler holds it. Its state condition is the partial indexes'
// (intents_reconcile, intents_reconcile_agent).
const reconcileDueSQL = `i.state IN ('UNKNOWN', 'RECONCILING') AND i.next_reconcile_at <= now()
	  AND (i.reconcile_expires IS NULL OR i.reconcile_expires < now())`

// leaseExpiredSQL: intent i is IN_FLIGHT on an attempt whose lease has
// expired.
const leaseExpiredSQL = `i.state = 'IN_FLIGHT' AND EXISTS (
		SELECT 1 FROM attempts a WHERE a.rail_account = i.rail_account AND a.sik = i.sik
		  AND a.attempt_seq = i.attempt_count AND a.lease_expires_at < now())`

// stillInFlightSQL re-checks leaseExpiredSQL on a candidate t as the
// claim locks it: still IN_FLIGHT on the attempt whose lease the
// statement saw expired (the attempt rows are the statement's either
// way; joining them again only let the planner scan them per row).
const stillInFlightSQL = `i.state = 'IN_FLIGHT' AND i.attempt_count = t.turn_attempt`

// fairTurnsSQL selects and locks up to $1 intents in scope ($2 to $5)
// meeting cond, re-checking recheck on each row it locks. It shares them
// among owners, then among an owner's agents: an intent's turn is its
// place among its owner's candidates, taken round-robin over the owner's
// agents, oldest (by column order) first, and every owner's turn 1 comes
// before any owner's turn 2. In one global order, one agent's backlog
// (native ALLOWs it never committed turn UNKNOWN when their leases end,
// within its limits) held every other owner's ambiguous refunds behind
// it, a batch a pass (found by a review: another owner's UNKNOWN refund
// settled after 15 s instead of 1 s behind 300 of them). The candidates
// are the oldest $1 overall (so intents with no agent too) and each
// agent's oldest $1, read from an index on (agent_id, order): a backlog
// costs one short index read per agent, not a read of the backlog. Window
// functions cannot share a level with FOR UPDATE, so the last level locks;
// it looks at the first 4·$1 turns only, room for concurrent claims to
// skip each other's rows, and few enough that the planner reads them by
// key instead of joining every due intent.
func fairTurnsSQL(cond, recheck, order string) string {
	return `
		WITH candidates AS (
			(SELECT i.rail_account, i.sik, i.attempt_count, i.agent_id, i.` + order + ` AS due_at FROM intents i
			WHERE ` + cond + ` AND ` + inScopeSQL + `
			ORDER BY i.` + order + `, i.rail_account, i.sik LIMIT $1)
			UNION
			(SELECT c.* FROM agents ag CROSS JOIN LATERAL (
				SELECT i.rail_account, i.sik, i.attempt_count, i.agent_id, i.` + order + ` AS due_at FROM intents i
				WHERE i.agent_id = ag.id AND ` + cond + ` AND ` + inScopeSQL + `
				ORDER BY i.` + order + `, i.rail_account, i.sik LIMIT $1) c)
		), agent_turns AS (
			SELECT c.rail_account, c.sik, c.attempt_count, c.due_at, ag.owner_id,
			       row_number() OVER (PARTITION BY c.agent_id ORDER BY c.due_at, c.rail_account, c.sik) AS agent_turn
			FROM candidates c LEFT JOIN agents ag ON ag.id = c.agent_id
		), turns AS (
			SELECT rail_account AS turn_account, sik AS turn_sik, attempt_count AS turn_attempt, due_at AS turn_due,
			       row_number() OVER (PARTITION BY owner_id ORDER BY agent_turn, due_at, rail_account, sik) AS turn
			FROM agent_turns
			ORDER BY turn, due_at, rail_account, sik LIMIT 4 * $1
		)
		SELECT ` + intentColumns + ` FROM turns t JOIN intents i ON i.rail_account = t.turn_account AND i.sik = t.turn_sik
		WHERE ` + recheck + `
		ORDER BY t.turn, t.turn_due, t.turn_account, t.turn_sik LIMIT $1 FOR UPDATE OF i SKIP LOCKED`
}

// ClaimReconcile leases up to limit intents that are due for
// reconciliation to owner for ttl, moving UNKNOWN ones to RECONCILING. An
// intent whose previous reconciler died (its lease expired) is claimed
// again as it stands.
//
// only, when set, restricts the claim to that intent.
func (s *Store) ClaimReconcile(ctx context.Context, owner string, ttl time.Duration, limit int, only *Key) ([]ReconcileWork, error) {
	return s.ClaimReconcileIn(ctx, owner, ttl, limit, ReconcileScope{Only: only})
}

// ClaimReconcileIn is ClaimReconcile of the intents in scope only: an
// intent outside it is neither claimed nor moved, nor is its rail account
// read for it.
func (s *Store) ClaimReconcileIn(ctx context.Context, owner string, ttl time.Duration, limit int, scope ReconcileScope) ([]ReconcileWork, error) {
	var work []ReconcileWork
	err := s.inTx(ctx, OpReconcileClaim, func(tx *Tx) error {
		work = nil
		rows, err := tx.tx.Query(ctx, fairTurnsSQL(reconcileDueSQL, reconcileDueSQL, "next_reconcile_at"), append([]any{limit}, scope.args()...)...)
		if err != nil {
			return err
		}
		its, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Intent, error) { return scanIntent(r) })
		if err != nil {
			return err
		}
		for _, it := range its {
			if it.State == intent.Unknown {
				if it, err = tx.transition(ctx, it, intent.ReconcileStarted, transitionOpts{reason: "reconciliation started"}); err != nil {
					return err
				}
			}
			if _, err := tx.tx.Exec(ctx, `
				UPDATE intents SET reconcile_owner = $3, reconcile_expires = now() + $4::bigint * interval '1 microsecond',
				       reconcile_count = reconcile_count + 1
				WHERE rail_account = $1 AND sik = $2`, it.RailAccount, it.SIK, owner, ttl.Microseconds()); err != nil {
				return err
			}
			it.ReconcileCount++
			a, err := tx.attempt(ctx, it.Key, it.AttemptCount)
			if err != nil {
				return err
			}
			w := ReconcileWork{Intent: it, Attempt: a}
			if err := tx.tx.QueryRow(ctx, earlierMayHaveLeftSQL, it.RailAccount, it.SIK, a.Seq, a.Stamp).Scan(&w.EarlierMayHaveLeft); err != nil {
				return err
			}
			if err := tx.tx.QueryRow(ctx, railDoneSQL, it.RailAccount, it.SIK, a.Seq).Scan(&w.RailDone); err != nil {
				return err
			}
			if w.StampFirstStarted, err = stampFirstStarted(ctx, tx.tx, it.Key, a.Stamp); err != nil {
				return err
			}
			work = append(work, w)
		}
		return nil
	})
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: claim reconcile: %w", err))
	}
	return work, nil
}

// ExpireLeasesIn is ExpireLeases of the intents in scope only: every
// IN_FLIGHT one whose attempt lease has expired becomes UNKNOWN
// (LEASE_EXPIRED), to be reconciled after delay. An owner's pass moves
// none of another owner's intents.
func (s *Store) ExpireLeasesIn(ctx context.Context, limit int, delay time.Duration, scope ReconcileScope) (int, error) {
	n := 0
	err := s.inTx(ctx, OpExpireLeases, func(tx *Tx) error {
		n = 0
		rows, err := tx.tx.Query(ctx, fairTurnsSQL(leaseExpiredSQL, stillInFlightSQL, "updated_at"), append([]any{limit}, scope.args()...)...)
		if err != nil {
			return err
		}
		expired, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Intent, error) { return scanIntent(r) })
		if err != nil {
			return err
		}
		for _, it := range expired {
			if _, err := tx.transition(ctx, it, intent.LeaseExpired, transitionOpts{
				reason: "attempt lease expired before the rail's answer was recorded", reconcileIn: &delay,
				attemptOutcome: "lease_expired"}); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, classify(err)
}

// FindingOutcome is what one reconciliation pass concluded.
type FindingOutcome string

// Finding outcomes.
const (
	FindingApplied      FindingOutcome = "found_applied"
	FindingAbsent       FindingOutcome = "confirmed_absent"
	FindingInconclusive FindingOutcome = "inconclusive"
)

// Finding is the evidence of one reconciliation pass.
type Finding struct {
	Key
	AttemptSeq          int
	Outcome             FindingOutcome
	Pages               int
	PaginationExhausted bool
	// NeverSent says the attempt never left: through Envoy with ext_proc
	// in the path, never marked sent, its lease expired (an absence
	// without a listing; the database refuses it for any other attempt).
	NeverSent bool
	EntityID  string
	// EntityBody is the found entity as the rail listed it (found_applied).
	EntityBody []byte
	Detail     string
	// FoundAt is when the pass was recorded (read by FindingsFor).
	FoundAt time.Time
	// Owner must hold the reconcile lease.
	Owner string
	// MaxReconciles quarantines the intent when an inconclusive pass is
	// its MaxReconciles-th.
	MaxReconciles int
	// Retry is when to look again after an inconclusive pass.
	Retry time.Duration
}

// ErrLeaseLost means another reconciler holds (or took over) the intent.
var ErrLeaseLost = errors.New("ledger: reconcile lease lost")

// RecordFinding stores a finding and settles the intent: found → APPLIED,
// absent after exhaustive paging → CONFIRMED_NOT_APPLIED (the database
// refuses it otherwise, and when the rail answered an attempt of the
// intent applied: then QUARANTINED), inconclusive → UNKNOWN, or
// QUARANTINED once the intent has been reconciled MaxReconciles times.
func (s *Store) RecordFinding(ctx context.Context, f Finding) (Intent, error) {
	var out Intent
	err := s.inTx(ctx, OpReconcileFinding, func(tx *Tx) error {
		it, err := tx.lockIntent(ctx, f.Key)
		if err != nil {
			return err
		}
		var owner *string
		if err := tx.tx.QueryRow(ctx, `SELECT reconcile_owner FROM intents WHERE rail_account = $1 AND sik = $2`,
			f.RailAccount, f.SIK).Scan(&owner); err != nil {
			return err
		}
		if it.State != intent.Reconciling || owner == nil || *owner != f.Owner || it.AttemptCount != f.AttemptSeq {
			return fmt.Errorf("%w: %s is %s", ErrLeaseLost, f.Key, it.State)
		}
		if _, err := tx.tx.Exec(ctx, `
			INSERT INTO reconciliation_findings (rail_account, sik, attempt_seq, outcome, pages, pagination_exhausted, entity_id, detail, entity_body, never_sent)
			VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''), $8, $9, $10)`,
			f.RailAccount, f.SIK, f.AttemptSeq, string(f.Outcome), f.Pages, f.PaginationExhausted, f.EntityID, f.Detail, f.EntityBody, f.NeverSent); err != nil {
			return err
		}
		switch f.Outcome {
		case FindingApplied:
			out, err = tx.transition(ctx, it, intent.FoundApplied, transitionOpts{
				reason: "found at the rail: " + f.EntityID, attemptOutcome: "applied", entityID: f.EntityID})
		case FindingAbsent:
			// The rail's own answer may have come after the lease expired
			// (it is kept on the attempt and moves nothing): a listing that
			// missed the entity does not overrule it. A person settles it.
			var seq int
			var entity string
			switch err = tx.tx.QueryRow(ctx, `SELECT attempt_seq, entity_id FROM attempts
				WHERE rail_account = $1 AND sik = $2 AND entity_id IS NOT NULL ORDER BY attempt_seq LIMIT 1`,
				f.RailAccount, f.SIK).Scan(&seq, &entity); {
			case err == nil:
				// The entity id is the rail's, and the reason leaves in
				// signed webhooks: inert.
				out, err = tx.transition(ctx, it, intent.Quarantine, transitionOpts{
					reason: fmt.Sprintf("reconciliation found no entity after %d pages, but the rail answered attempt %d applied (entity %s); check the rail before resolving", f.Pages, seq, inert.Token(entity))})
			case errors.Is(err, pgx.ErrNoRows):
				out, err = tx.transition(ctx, it, intent.ConfirmedAbsent, transitionOpts{
					reason: fmt.Sprintf("absent after %d pages read to the end", f.Pages)})
			}
		case FindingInconclusive:
			if f.MaxReconciles > 0 && it.ReconcileCount >= f.MaxReconciles {
				why := fmt.Sprintf("still inconclusive after %d reconciliations: %s", it.ReconcileCount, f.Detail)
				if it.ReconcileCount == 1 {
					why = "inconclusive, for a person to settle: " + f.Detail
				}
				out, err = tx.transition(ctx, it, intent.Quarantine, transitionOpts{reason: why})
			} else {
				retry := f.Retry
				out, err = tx.transition(ctx, it, intent.Inconclusive, transitionOpts{reason: f.Detail, reconcileIn: &retry})
			}
		default:
			err = fmt.Errorf("unknown finding outcome %q", f.Outcome)
		}
		if err != nil {
			return err
		}
		if out.State != intent.Applied {
			_, err = tx.tx.Exec(ctx, `UPDATE intents SET reconcile_owner = NULL, reconcile_expires = NULL
				WHERE rail_account = $1 AND sik = $2`, f.RailAccount, f.SIK)
		}
		return err
	})
	if err != nil {
		return Intent{}, classify(fmt.Errorf("ledger: record finding %s: %w", f.Key, err))
	}
	return out, nil
}

// FindingsFor lists the findings recorded for an intent, oldest first.
func (s *Store) FindingsFor(ctx context.Context, k Key) ([]Finding, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT attempt_seq, outcome, pages, pagination_exhausted, COALESCE(entity_id, ''), detail, entity_body, found_at
		FROM reconciliation_findings WHERE rail_account = $1 AND sik = $2 ORDER BY id`, k.RailAccount, k.SIK)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Finding, error) {
		f := Finding{Key: k}
		var outcome string
		err := r.Scan(&f.AttemptSeq, &outcome, &f.Pages, &f.PaginationExhausted, &f.EntityID, &f.Detail, &f.EntityBody, &f.FoundAt)
		f.Outcome = FindingOutcome(outcome)
		return f, err
	})
	return out, classify(err)
}

// StampFirstStarted is when the first of k's attempts under stamp started
// (attempts.started_at, the database's clock): the earliest a request
// carrying stamp can have left, so the earliest the rail can have made an
// entity under it, but for a difference between the database's clock and
// the rail's. started_at is now() of the transaction that writes the
// attempt, and no request carrying its stamp leaves before that
// transaction commits (I2: ext_authz allows it, and a native Decide names
// the stamp, only after). The first attempt, not the latest: a retry after
// a proven absence keeps the stamp, and the first request may reach the
// rail late, after its lease expired or the retry started; a reopen bumps
// the stamp's generation, so attempts under an older stamp do not count.
// ErrNotFound when k has no attempt under stamp.
func (tx *Tx) StampFirstStarted(ctx context.Context, k Key, stamp string) (time.Time, error) {
	return stampFirstStarted(ctx, tx.tx, k, stamp)
}

// stampFirstStartedSQL is StampFirstStarted of stamp $3 of intent ($1, $2).
const stampFirstStartedSQL = `SELECT min(started_at) FROM attempts WHERE rail_account = $1 AND sik = $2 AND stamp = $3`

func stampFirstStarted(ctx context.Context, q rowQuerier, k Key, stamp string) (time.Time, error) {
	var first *time.Time
	if err := q.QueryRow(ctx, stampFirstStartedSQL, k.RailAccount, k.SIK, stamp).Scan(&first); err != nil {
		return time.Time{}, err
	}
	if first == nil {
		return time.Time{}, fmt.Errorf("%w: intent %s has no attempt under stamp %s", ErrNotFound, k, stamp)
	}
	return *first, nil
}
