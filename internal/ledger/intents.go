package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/intent"
)

// Key identifies an intent (I1).
type Key struct {
	RailAccount string
	SIK         string
}

func (k Key) String() string { return k.RailAccount + "/" + k.SIK }

// Intent is one row of the intents table.
type Intent struct {
	Key
	State             intent.State
	LastEvent         string
	Rail              string
	Action            string
	Subject           string
	AmountMinor       int64
	Currency          string
	Payee             string
	DistinctReason    string
	Canonical         string
	AgentID           string
	StampGeneration   uint32
	AttemptCount      int
	ReconcileCount    int
	RailEntityID      string
	AppliedAttemptSeq int
	Reason            string
	NextReconcileAt   *time.Time
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// HTTPMessage is a stored request or response.
type HTTPMessage struct {
	Method  string            `json:"method,omitempty"`
	Path    string            `json:"path,omitempty"`
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    []byte            `json:"body,omitempty"`
}

// Attempt is one stamped request that may have reached the rail.
type Attempt struct {
	Key
	Seq             int
	Stamp           string
	StampGeneration uint32
	Outcome         string
	LeaseOwner      string
	LeaseExpiresAt  time.Time
	Request         HTTPMessage
	Response        *HTTPMessage
	TransportError  string
	BodyStamped     bool
	ViaEnvoy        bool
	EntityID        string
	FeeMinor        int64
	StartedAt       time.Time
	FinishedAt      *time.Time
	// FoundEntity is the entity as the rail listed it when reconciliation
	// found this attempt applied: the rail's own JSON, carrying the
	// attempt's stamp. Read only for the applying attempt handed to a
	// duplicate (ProposeResult.Applied); nil otherwise.
	FoundEntity []byte
}

// Proposal is a new money-moving action, fully resolved, on its way to the
// rail.
type Proposal struct {
	Key
	Rail           string
	Action         string
	Subject        string
	AmountMinor    int64
	Currency       string
	Payee          string
	DistinctReason string
	Canonical      string
	AgentID        string
	// Alias is the key of the request as sent (see LookupAlias); "" for none.
	Alias string
	// Decision, when set, is recorded as the ALLOW decision in the same
	// transaction as the attempt it allows (one commit on the hot path).
	Decision *Decision
	// Gate runs the gate ladder inside the deciding transaction, after the
	// intent is written or locked and before any attempt starts, for a new
	// intent and for one that a new proposal may move on (reopen, retry).
	// nil passes everything (tests of the ledger alone).
	Gate func(ctx context.Context, tx *Tx, it Intent) (GateVerdict, error)
	// Stamp computes the stamp of an attempt at a stamp generation.
	Stamp func(gen uint32) (string, error)
	// LeaseOwner names this process; LeaseTTL bounds how long an attempt
	// may stay IN_FLIGHT before it is presumed lost and reconciled.
	LeaseOwner string
	LeaseTTL   time.Duration
	// ReconcileDelay is the minimum wait before the first reconciliation
	// query of an intent whose lease expires here (no read-your-writes).
	ReconcileDelay time.Duration
	Request        HTTPMessage
	// ViaEnvoy says the request goes out through Envoy (ext_authz, then
	// ext_proc writing the body stamp), not through a native caller.
	ViaEnvoy bool
	// CommitTokenHash is the SHA-256 of the commit token handed to a native
	// caller with the attempt this proposal starts; only that token's holder
	// may report the attempt's answer through Commit. nil: no token (Envoy
	// sends the request and ext_proc reports it).
	CommitTokenHash []byte
}

// ProposeResult says what Propose did.
type ProposeResult struct {
	Intent Intent
	// Attempt is the attempt that started (the caller may send the request);
	// nil when no attempt started.
	Attempt *Attempt
	// Created is true when this call created the intent.
	Created bool
	// Applied is the attempt that applied an APPLIED intent, for replaying
	// its stored response.
	Applied *Attempt
	// DecisionID is the ALLOW decision recorded with the attempt.
	DecisionID int64
	// Gates is the gates' verdict when they ran. On BLOCK nothing was
	// written: the intent (if new) does not exist.
	Gates *GateVerdict
}

const intentColumns = `rail_account, sik, state, last_event, rail, action, subject, amount_minor, currency,
	payee, distinct_reason, canonical, COALESCE(agent_id, ''), stamp_generation, attempt_count, reconcile_count,
	COALESCE(rail_entity_id, ''), COALESCE(applied_attempt_seq, 0), reason, next_reconcile_at, created_at, updated_at`

func scanIntent(row pgx.Row) (Intent, error) {
	var it Intent
	var state string
	var gen int32
	err := row.Scan(&it.RailAccount, &it.SIK, &state, &it.LastEvent, &it.Rail, &it.Action, &it.Subject,
		&it.AmountMinor, &it.Currency, &it.Payee, &it.DistinctReason, &it.Canonical, &it.AgentID,
		&gen, &it.AttemptCount, &it.ReconcileCount, &it.RailEntityID, &it.AppliedAttemptSeq,
		&it.Reason, &it.NextReconcileAt, &it.CreatedAt, &it.UpdatedAt)
	it.State = intent.State(state)
	it.StampGeneration = uint32(gen)
	return it, err
}

// Propose writes the intent of p (or finds the existing one, I1) and, when
// the state machine allows, starts a durable attempt in the same
// transaction. The attempt row is committed before Propose returns (I2):
// only then may the caller let the request go.
func (s *Store) Propose(ctx context.Context, p Proposal) (ProposeResult, error) {
	var res ProposeResult
	err := s.InTx(ctx, func(tx *Tx) error {
		res = ProposeResult{}
		it, err := scanIntent(tx.tx.QueryRow(ctx, `
			INSERT INTO intents (rail_account, sik, state, last_event, rail, action, subject, amount_minor,
			                     currency, payee, distinct_reason, canonical, agent_id)
			VALUES ($1, $2, 'PROPOSED', 'PROPOSED', $3, $4, $5, $6, $7, $8, $9, $10, NULLIF($11, ''))
			ON CONFLICT (rail_account, sik) DO NOTHING
			RETURNING `+intentColumns,
			p.RailAccount, p.SIK, p.Rail, p.Action, p.Subject, p.AmountMinor, p.Currency, p.Payee,
			p.DistinctReason, p.Canonical, p.AgentID))
		switch {
		case err == nil:
			res.Created = true
			v, err := tx.gate(ctx, p, it, &res)
			if err != nil {
				return err
			}
			if v.Verdict == "BLOCK" {
				return errGateBlocked
			}
			if v.Verdict == "HOLD" {
				if res.Intent, err = tx.transition(ctx, it, intent.GatesHeld, transitionOpts{reason: v.Reason}); err != nil {
					return err
				}
				return tx.openApproval(ctx, res.Intent, v)
			}
			if it, err = tx.transition(ctx, it, intent.GatesPassed, transitionOpts{}); err != nil {
				return err
			}
			if err := tx.hold(ctx, it, v); err != nil {
				return err
			}
		case errors.Is(err, pgx.ErrNoRows):
			if it, err = tx.lockIntent(ctx, p.Key); err != nil {
				return err
			}
			// Another owner's intent is neither moved nor described: its
			// approval, its reopening and its answer are its owner's.
			if p.AgentID != "" {
				same, err := tx.sameOwner(ctx, p.AgentID, it.AgentID)
				if err != nil {
					return err
				}
				if !same {
					return ErrForeignIntent
				}
			}
		default:
			return err
		}
		if p.Alias != "" {
			if _, err := tx.tx.Exec(ctx, `INSERT INTO intent_aliases (rail_account, alias, sik) VALUES ($1, $2, $3)
				ON CONFLICT (rail_account, alias) DO NOTHING`, p.RailAccount, p.Alias, p.SIK); err != nil {
				return err
			}
		}
		res.Intent = it
		return tx.advance(ctx, p, &res)
	})
	if errors.Is(err, errGateBlocked) {
		return res, nil
	}
	if errors.Is(err, ErrForeignIntent) {
		return ProposeResult{}, ErrForeignIntent
	}
	if err != nil {
		return ProposeResult{}, classify(fmt.Errorf("ledger: propose %s: %w", p.Key, err))
	}
	return res, nil
}

// gate runs p.Gate; a BLOCK ends the transaction (rolled back), a HOLD is
// for the caller to record.
func (tx *Tx) gate(ctx context.Context, p Proposal, it Intent, res *ProposeResult) (GateVerdict, error) {
	if p.Gate == nil {
		return GateVerdict{Verdict: "ALLOW"}, nil
	}
	v, err := p.Gate(ctx, tx, it)
	if err != nil {
		return v, err
	}
	res.Gates = &v
	switch v.Verdict {
	case "ALLOW", "HOLD", "BLOCK":
		return v, nil
	}
	return v, fmt.Errorf("gates answered %q", v.Verdict)
}

func (tx *Tx) hold(ctx context.Context, it Intent, v GateVerdict) error {
	if v.Hold == nil {
		return nil
	}
	return tx.placeHold(ctx, it, *v.Hold)
}

// advance moves an existing intent as far as a new proposal of the same
// action may take it.
func (tx *Tx) advance(ctx context.Context, p Proposal, res *ProposeResult) error {
	it := res.Intent
	switch it.State {
	case intent.Applied:
		a, err := appliedAttempt(ctx, tx.tx, it)
		if err != nil {
			return err
		}
		res.Applied = &a
		return nil
	case intent.InFlight:
		// A live lease means the first caller's request may be at the rail
		// right now; an expired one means nobody will commit it: reconcile.
		expired, err := tx.leaseExpired(ctx, it.Key, it.AttemptCount)
		if err != nil || !expired {
			return err
		}
		res.Intent, err = tx.transition(ctx, it, intent.LeaseExpired, transitionOpts{
			reason: "attempt lease expired before the rail's answer was recorded", reconcileIn: &p.ReconcileDelay,
			attemptOutcome: "lease_expired"})
		return err
	case intent.FailedTerminal, intent.ConfirmedNotApplied:
		// A fresh proposal of an action proven not applied: the gates run
		// again (budgets and windows moved since), then a new attempt.
		v, err := tx.gate(ctx, p, it, res)
		if err != nil {
			return err
		}
		if v.Verdict == "BLOCK" {
			return errGateBlocked
		}
		if v.Verdict == "HOLD" {
			// Held for the owner: nothing moves, the intent stays as it is,
			// and the owner is asked again (the approval of the first
			// attempt was used by it).
			return tx.openApproval(ctx, it, v)
		}
		if v.UsesApproval {
			if err := tx.settleApproval(ctx, it.Key, "approved", "used"); err != nil {
				return err
			}
		}
		if it.State == intent.FailedTerminal {
			// A definite rejection: the rail saved that answer under the
			// old key, so the reopened action needs a new stamp generation.
			it, err = tx.transition(ctx, it, intent.Reopened, transitionOpts{bumpGeneration: true, reason: "reopened by a fresh proposal"})
		} else {
			// Proven absent: retry under the same stamp, so that a late
			// copy of the old request and the retry still deduplicate.
			it, err = tx.transition(ctx, it, intent.RetryAuthorized, transitionOpts{reason: "retry after proven absence"})
		}
		if err != nil {
			return err
		}
		if err := tx.hold(ctx, it, v); err != nil {
			return err
		}
	case intent.Held:
		// The identical request again: if the owner approved it, the gates
		// run again against the live limits (an approval never widens a
		// mandate) and the approval is used once.
		v, err := tx.gate(ctx, p, it, res)
		if err != nil {
			return err
		}
		switch v.Verdict {
		case "BLOCK":
			if res.Intent, err = tx.transition(ctx, it, intent.GatesBlocked, transitionOpts{reason: v.Reason}); err != nil {
				return err
			}
			return tx.settleApproval(ctx, it.Key, "approved", "void")
		case "HOLD":
			return tx.openApproval(ctx, it, v) // keeps a live one; reopens an expired one
		}
		if it, err = tx.transition(ctx, it, intent.HoldReleased, transitionOpts{reason: "approved by the owner"}); err != nil {
			return err
		}
		if v.UsesApproval {
			if err := tx.settleApproval(ctx, it.Key, "approved", "used"); err != nil {
				return err
			}
		}
		if err := tx.hold(ctx, it, v); err != nil {
			return err
		}
	case intent.Authorized:
	default:
		return nil // PROPOSED, HELD, UNKNOWN, RECONCILING, BLOCKED, QUARANTINED: no attempt
	}
	return tx.startAttempt(ctx, p, it, res)
}

func (tx *Tx) startAttempt(ctx context.Context, p Proposal, it Intent, res *ProposeResult) error {
	stamp, err := p.Stamp(it.StampGeneration)
	if err != nil {
		return fmt.Errorf("stamp: %w", err)
	}
	it, err = tx.transition(ctx, it, intent.AttemptStarted, transitionOpts{})
	if err != nil {
		return err
	}
	headers, err := json.Marshal(p.Request.Headers)
	if err != nil {
		return err
	}
	ttl := p.LeaseTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	a := Attempt{Key: it.Key, Seq: it.AttemptCount, Stamp: stamp, StampGeneration: it.StampGeneration,
		Outcome: "pending", LeaseOwner: p.LeaseOwner, Request: p.Request}
	err = tx.tx.QueryRow(ctx, insertAttemptSQL, attemptArgs(a, ttl, headers, p.ViaEnvoy, p.CommitTokenHash)...).Scan(&a.LeaseExpiresAt, &a.StartedAt)
	if err != nil {
		return err
	}
	res.Intent, res.Attempt = it, &a
	if p.Decision != nil {
		d := *p.Decision
		d.Verdict, d.RailAccount, d.SIK, d.AttemptSeq = "ALLOW", it.RailAccount, it.SIK, a.Seq
		if res.Gates != nil {
			d.Gates = res.Gates.Gates
		}
		if res.DecisionID, err = insertDecision(ctx, tx.tx, d); err != nil {
			return err
		}
	}
	return nil
}

const insertAttemptSQL = `
		INSERT INTO attempts (rail_account, sik, attempt_seq, stamp, stamp_generation, lease_owner, lease_expires_at,
		                      request_method, request_path, request_headers, request_body, via_envoy, commit_token_hash)
		VALUES ($1, $2, $3, $4, $5, $6, now() + $7::bigint * interval '1 microsecond', $8, $9, $10, $11, $12, $13)
		RETURNING lease_expires_at, started_at`

func attemptArgs(a Attempt, ttl time.Duration, headers []byte, viaEnvoy bool, tokenHash []byte) []any {
	return []any{a.RailAccount, a.SIK, a.Seq, a.Stamp, int32(a.StampGeneration), a.LeaseOwner, ttl.Microseconds(),
		a.Request.Method, a.Request.Path, headers, a.Request.Body, viaEnvoy, tokenHash}
}

type transitionOpts struct {
	reason         string
	bumpGeneration bool
	// reconcileIn schedules the first reconciliation after this delay.
	reconcileIn *time.Duration
	// attemptOutcome settles the current attempt with this outcome if it
	// is still pending.
	attemptOutcome string
	entityID       string
}

// transition applies event to it, checking the edge in Go first (the
// trigger checks it again) and returning the updated row.
func (tx *Tx) transition(ctx context.Context, it Intent, ev intent.Event, o transitionOpts) (Intent, error) {
	sql, args, err := transitionStatement(it, ev, o)
	if err != nil {
		return it, err
	}
	out, err := scanIntent(tx.tx.QueryRow(ctx, sql, args...))
	if err != nil {
		return it, err
	}
	if o.attemptOutcome != "" {
		if _, err := tx.tx.Exec(ctx, settleAttemptSQL, it.RailAccount, it.SIK, it.AttemptCount, o.attemptOutcome, o.entityID); err != nil {
			return it, err
		}
	}
	return out, nil
}

const transitionSQL = `
		UPDATE intents SET state = $3, last_event = $4, attempt_count = $5, stamp_generation = $6,
		       reason = $7,
		       next_reconcile_at = CASE WHEN $8::bigint IS NOT NULL THEN now() + $8::bigint * interval '1 microsecond'
		                                WHEN $3 IN ('UNKNOWN', 'RECONCILING') THEN next_reconcile_at
		                                ELSE NULL END,
		       applied_attempt_seq = $9, rail_entity_id = $10
		WHERE rail_account = $1 AND sik = $2
		RETURNING ` + intentColumns

const settleAttemptSQL = `
			UPDATE attempts SET outcome = $4, finished_at = COALESCE(finished_at, now()),
			       entity_id = COALESCE(entity_id, NULLIF($5, ''))
			WHERE rail_account = $1 AND sik = $2 AND attempt_seq = $3
			  AND outcome IN ('pending', 'in_progress', 'ambiguous', 'lease_expired')`

// transitionStatement is the UPDATE that applies ev to it (the edge
// checked in Go first; the trigger checks it again).
func transitionStatement(it Intent, ev intent.Event, o transitionOpts) (string, []any, error) {
	next, err := intent.Transition(it.State, ev)
	if err != nil {
		return "", nil, err
	}
	attempts := it.AttemptCount
	if intent.StartsAttempt(ev) {
		attempts++
	}
	gen := it.StampGeneration
	if o.bumpGeneration {
		gen++
	}
	var reconcileAt any
	if o.reconcileIn != nil {
		reconcileAt = o.reconcileIn.Microseconds()
	}
	applied := any(nil)
	entity := any(nil)
	if next == intent.Applied {
		applied, entity = attempts, o.entityID
	}
	return transitionSQL, []any{it.RailAccount, it.SIK, string(next), string(ev), attempts, int32(gen), o.reason, reconcileAt,
		applied, entity}, nil
}

func (tx *Tx) lockIntent(ctx context.Context, k Key) (Intent, error) {
	it, err := scanIntent(tx.tx.QueryRow(ctx, `SELECT `+intentColumns+`
		FROM intents WHERE rail_account = $1 AND sik = $2 FOR UPDATE`, k.RailAccount, k.SIK))
	if errors.Is(err, pgx.ErrNoRows) {
		return Intent{}, fmt.Errorf("%w: intent %s", ErrNotFound, k)
	}
	return it, err
}

func (tx *Tx) leaseExpired(ctx context.Context, k Key, seq int) (bool, error) {
	var expired bool
	err := tx.tx.QueryRow(ctx, `
		SELECT lease_expires_at < now() FROM attempts
		WHERE rail_account = $1 AND sik = $2 AND attempt_seq = $3`, k.RailAccount, k.SIK, seq).Scan(&expired)
	return expired, err
}

const attemptColumns = `rail_account, sik, attempt_seq, stamp, stamp_generation, outcome, lease_owner, lease_expires_at,
	request_method, request_path, request_headers, request_body, response_status, response_headers, response_body,
	COALESCE(transport_error, ''), body_stamped, via_envoy, COALESCE(entity_id, ''), COALESCE(fee_minor, 0), started_at, finished_at`

func scanAttempt(row pgx.Row) (Attempt, error) {
	var a Attempt
	var gen int32
	var reqHeaders, respHeaders []byte
	var status *int32
	var respBody []byte
	err := row.Scan(&a.RailAccount, &a.SIK, &a.Seq, &a.Stamp, &gen, &a.Outcome, &a.LeaseOwner, &a.LeaseExpiresAt,
		&a.Request.Method, &a.Request.Path, &reqHeaders, &a.Request.Body, &status, &respHeaders, &respBody,
		&a.TransportError, &a.BodyStamped, &a.ViaEnvoy, &a.EntityID, &a.FeeMinor, &a.StartedAt, &a.FinishedAt)
	if err != nil {
		return a, err
	}
	a.StampGeneration = uint32(gen)
	if len(reqHeaders) > 0 {
		if err := json.Unmarshal(reqHeaders, &a.Request.Headers); err != nil {
			return a, fmt.Errorf("attempt %s#%d request headers: %w", a.Key, a.Seq, err)
		}
	}
	if status != nil {
		a.Response = &HTTPMessage{Status: int(*status), Body: respBody}
		if len(respHeaders) > 0 {
			if err := json.Unmarshal(respHeaders, &a.Response.Headers); err != nil {
				return a, fmt.Errorf("attempt %s#%d response headers: %w", a.Key, a.Seq, err)
			}
		}
	}
	return a, nil
}

// rowQuerier is a pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// appliedAttempt is the attempt that applied an APPLIED intent, with the
// entity reconciliation found when it was settled that way: what a
// duplicate is answered with.
func appliedAttempt(ctx context.Context, q rowQuerier, it Intent) (Attempt, error) {
	a, err := scanAttempt(q.QueryRow(ctx, `SELECT `+attemptColumns+`
		FROM attempts WHERE rail_account = $1 AND sik = $2 AND attempt_seq = $3`, it.RailAccount, it.SIK, it.AppliedAttemptSeq))
	if errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("%w: attempt %s#%d", ErrNotFound, it.Key, it.AppliedAttemptSeq)
	}
	if err != nil || it.LastEvent != string(intent.FoundApplied) {
		return a, err
	}
	err = q.QueryRow(ctx, `SELECT entity_body FROM reconciliation_findings
		WHERE rail_account = $1 AND sik = $2 AND attempt_seq = $3 AND outcome = 'found_applied'
		ORDER BY id DESC LIMIT 1`, it.RailAccount, it.SIK, it.AppliedAttemptSeq).Scan(&a.FoundEntity)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, nil
	}
	return a, err
}

func (tx *Tx) attempt(ctx context.Context, k Key, seq int) (Attempt, error) {
	a, err := scanAttempt(tx.tx.QueryRow(ctx, `SELECT `+attemptColumns+`
		FROM attempts WHERE rail_account = $1 AND sik = $2 AND attempt_seq = $3`, k.RailAccount, k.SIK, seq))
	if errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("%w: attempt %s#%d", ErrNotFound, k, seq)
	}
	return a, err
}

// GetIntent returns an intent and its attempts, oldest first.
func (s *Store) GetIntent(ctx context.Context, k Key) (Intent, []Attempt, error) {
	it, err := scanIntent(s.pool.QueryRow(ctx, `SELECT `+intentColumns+`
		FROM intents WHERE rail_account = $1 AND sik = $2`, k.RailAccount, k.SIK))
	if errors.Is(err, pgx.ErrNoRows) {
		return Intent{}, nil, fmt.Errorf("%w: intent %s", ErrNotFound, k)
	}
	if err != nil {
		return Intent{}, nil, classify(err)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+attemptColumns+`
		FROM attempts WHERE rail_account = $1 AND sik = $2 ORDER BY attempt_seq`, k.RailAccount, k.SIK)
	if err != nil {
		return Intent{}, nil, classify(err)
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return Intent{}, nil, classify(err)
		}
		out = append(out, a)
	}
	return it, out, classify(rows.Err())
}

// IntentsBySubject lists the intents on a subject, oldest first.
func (s *Store) IntentsBySubject(ctx context.Context, subject string) ([]Intent, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+intentColumns+` FROM intents WHERE subject = $1 ORDER BY created_at, sik`, subject)
	if err != nil {
		return nil, classify(err)
	}
	its, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Intent, error) { return scanIntent(r) })
	return its, classify(err)
}

// LookupAlias finds the intent a request with this alias resolved to
// before, with the applying attempt when it is APPLIED. ErrNotFound when no
// request with the alias was proposed.
func (s *Store) LookupAlias(ctx context.Context, railAccount, alias string) (ProposeResult, error) {
	var res ProposeResult
	it, err := scanIntent(s.pool.QueryRow(ctx, `SELECT `+intentColumns+` FROM intents
		WHERE rail_account = $1 AND sik = (SELECT sik FROM intent_aliases WHERE rail_account = $1 AND alias = $2)`,
		railAccount, alias))
	if errors.Is(err, pgx.ErrNoRows) {
		return res, fmt.Errorf("%w: alias %s/%s", ErrNotFound, railAccount, alias)
	}
	if err != nil {
		return res, classify(err)
	}
	res.Intent = it
	if it.State == intent.Applied {
		a, err := appliedAttempt(ctx, s.pool, it)
		if err != nil {
			return res, classify(err)
		}
		res.Applied = &a
	}
	return res, nil
}
