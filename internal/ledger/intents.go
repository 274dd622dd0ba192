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
	// LeftUnstamped: ext_proc let the request leave without a body
	// stamp (no body, or no place for one): no listing can show it absent.
	LeftUnstamped bool
	ViaEnvoy      bool
	EntityID      string
	FeeMinor      int64
	StartedAt     time.Time
	FinishedAt    *time.Time
	// FoundEntity is the entity as the rail listed it when reconciliation
	// found this attempt applied: the rail's own JSON, carrying the
	// attempt's stamp. Read only for the applying attempt handed to a
	// duplicate (ProposeResult.Applied); nil otherwise.
	FoundEntity []byte
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

// CreateIntent writes p's intent, PROPOSED and audited, unless one with
// its key exists (I1): then created is false, nothing is written, and the
// caller locks the existing one (LockIntent).
func (tx *Tx) CreateIntent(ctx context.Context, p NewIntent) (it Intent, created bool, err error) {
	it, err = scanIntent(tx.tx.QueryRow(ctx, `
		INSERT INTO intents (rail_account, sik, state, last_event, rail, action, subject, amount_minor,
		                     currency, payee, distinct_reason, canonical, agent_id`+familyColumn(p)+`)
		VALUES ($1, $2, 'PROPOSED', 'PROPOSED', $3, $4, $5, $6, $7, $8, $9, $10, NULLIF($11, '')`+familyValue(p, 12)+`)
		ON CONFLICT (rail_account, sik) DO NOTHING
		RETURNING `+intentColumns,
		newIntentArgs(p)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return Intent{}, false, nil
	}
	return it, err == nil, err
}

// LockIntent reads an intent for update: the deciding transactions of one
// intent take turns.
func (tx *Tx) LockIntent(ctx context.Context, k Key) (Intent, error) { return tx.lockIntent(ctx, k) }

// SameOwner reports whether agents a and b have one owner ("" is nobody's).
func (tx *Tx) SameOwner(ctx context.Context, a, b string) (bool, error) {
	return tx.sameOwner(ctx, a, b)
}

// AddAlias records that a request with alias resolved to k.
func (tx *Tx) AddAlias(ctx context.Context, k Key, alias string) error {
	_, err := tx.tx.Exec(ctx, `INSERT INTO intent_aliases (rail_account, alias, sik) VALUES ($1, $2, $3)
		ON CONFLICT (rail_account, alias) DO NOTHING`, k.RailAccount, alias, k.SIK)
	return err
}

// TransitionOpts shape a transition's row.
type TransitionOpts struct {
	Reason string
	// BumpGeneration starts a new stamp generation (a reopened intent).
	BumpGeneration bool
	// ReconcileIn schedules the first reconciliation after this delay.
	ReconcileIn *time.Duration
	// AttemptOutcome settles the current attempt with this outcome if it is
	// still pending.
	AttemptOutcome string
}

// Transition applies ev to it (the edge checked in Go, then by the
// trigger, which audits it) and returns the updated row.
func (tx *Tx) Transition(ctx context.Context, it Intent, ev intent.Event, o TransitionOpts) (Intent, error) {
	return tx.transition(ctx, it, ev, transitionOpts{reason: o.Reason, bumpGeneration: o.BumpGeneration,
		reconcileIn: o.ReconcileIn, attemptOutcome: o.AttemptOutcome})
}

// StartAttempt moves an AUTHORIZED intent IN_FLIGHT and writes its next
// attempt, durable when the transaction commits (I2).
func (tx *Tx) StartAttempt(ctx context.Context, it Intent, s AttemptStart) (Intent, Attempt, error) {
	it, err := tx.transition(ctx, it, intent.AttemptStarted, transitionOpts{})
	if err != nil {
		return it, Attempt{}, err
	}
	headers, err := json.Marshal(s.Request.Headers)
	if err != nil {
		return it, Attempt{}, err
	}
	ttl := s.LeaseTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	a := Attempt{Key: it.Key, Seq: it.AttemptCount, Stamp: s.Stamp, StampGeneration: it.StampGeneration,
		Outcome: "pending", LeaseOwner: s.LeaseOwner, Request: s.Request, ViaEnvoy: s.ViaEnvoy}
	sql, args := insertAttempt(a, ttl, headers, s)
	err = tx.tx.QueryRow(ctx, sql, args...).Scan(&a.LeaseExpiresAt, &a.StartedAt)
	return it, a, err
}

// AppliedAttempt is Store.AppliedAttempt inside the transaction.
func (tx *Tx) AppliedAttempt(ctx context.Context, it Intent) (Attempt, error) {
	return appliedAttempt(ctx, tx.tx, it)
}

// LeaseExpired reports whether attempt seq of k is past its lease.
func (tx *Tx) LeaseExpired(ctx context.Context, k Key, seq int) (bool, error) {
	return tx.leaseExpired(ctx, k, seq)
}

// RecordDecision writes a decision in the transaction.
func (tx *Tx) RecordDecision(ctx context.Context, d Decision) (int64, error) {
	return insertDecision(ctx, tx.tx, d)
}

// insertAttempt is the statement and arguments that write attempt a. Only
// a native attempt names the agent its commit token is issued to (an
// Envoy attempt has neither), so the statement of one without stays the
// one that schemas before that column take.
func insertAttempt(a Attempt, ttl time.Duration, headers []byte, s AttemptStart) (string, []any) {
	args := []any{a.RailAccount, a.SIK, a.Seq, a.Stamp, int32(a.StampGeneration), a.LeaseOwner, ttl.Microseconds(),
		a.Request.Method, a.Request.Path, headers, a.Request.Body, s.ViaEnvoy, s.CommitTokenHash}
	columns, values := "", ""
	if s.CommitAgent != "" {
		columns, values = ", commit_agent", ", $14"
		args = append(args, s.CommitAgent)
	}
	if !s.ViaEnvoy && s.MayApplyFor > 0 {
		args = append(args, (ttl + s.MayApplyFor).Microseconds())
		columns += ", may_apply_until"
		values += fmt.Sprintf(", now() + $%d::bigint * interval '1 microsecond'", len(args))
	}
	return `
		INSERT INTO attempts (rail_account, sik, attempt_seq, stamp, stamp_generation, lease_owner, lease_expires_at,
		                      request_method, request_path, request_headers, request_body, via_envoy, commit_token_hash` + columns + `)
		VALUES ($1, $2, $3, $4, $5, $6, now() + $7::bigint * interval '1 microsecond', $8, $9, $10, $11, $12, $13` + values + `)
		RETURNING lease_expires_at, started_at`, args
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
	// The attempt first, then the intent, as the response path's commit
	// does (seenCommit): the attempt's settlement counts its fee (the
	// mandate's fee row of its shard), the intent's posts its hold (the
	// spent row of its shard, the windows). Two commits taking those rows
	// in opposite orders deadlocked when their SIKs shared a shard.
	if o.attemptOutcome != "" {
		if _, err := tx.tx.Exec(ctx, settleAttemptSQL, it.RailAccount, it.SIK, it.AttemptCount, o.attemptOutcome, o.entityID); err != nil {
			return it, err
		}
	}
	out, err := scanIntent(tx.tx.QueryRow(ctx, sql, args...))
	if err != nil {
		return it, err
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
			  AND outcome IN ` + unsettledOutcomes

// unsettledOutcomes are the attempt outcomes a settlement may replace.
const unsettledOutcomes = `('pending', 'in_progress', 'ambiguous', 'lease_expired')`

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
	COALESCE(transport_error, ''), body_stamped, left_unstamped, via_envoy, COALESCE(entity_id, ''), COALESCE(fee_minor, 0), started_at, finished_at`

func scanAttempt(row pgx.Row) (Attempt, error) {
	var a Attempt
	var gen int32
	var reqHeaders, respHeaders []byte
	var status *int32
	var respBody []byte
	err := row.Scan(&a.RailAccount, &a.SIK, &a.Seq, &a.Stamp, &gen, &a.Outcome, &a.LeaseOwner, &a.LeaseExpiresAt,
		&a.Request.Method, &a.Request.Path, &reqHeaders, &a.Request.Body, &status, &respHeaders, &respBody,
		&a.TransportError, &a.BodyStamped, &a.LeftUnstamped, &a.ViaEnvoy, &a.EntityID, &a.FeeMinor, &a.StartedAt, &a.FinishedAt)
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

// Intent returns one intent, without its attempts.
func (s *Store) Intent(ctx context.Context, k Key) (Intent, error) {
	it, err := scanIntent(s.pool.QueryRow(ctx, `SELECT `+intentColumns+`
		FROM intents WHERE rail_account = $1 AND sik = $2`, k.RailAccount, k.SIK))
	if errors.Is(err, pgx.ErrNoRows) {
		return Intent{}, fmt.Errorf("%w: intent %s", ErrNotFound, k)
	}
	return it, classify(err)
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

// CountQuarantined is the number of intents waiting in QUARANTINED for an
// operator on the rail accounts named (none: 0). It reads only the
// partial index of quarantined intents.
func (s *Store) CountQuarantined(ctx context.Context, accounts []string) (int64, error) {
	var n int64
	if len(accounts) == 0 {
		return 0, nil
	}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM intents WHERE state = 'QUARANTINED' AND rail_account = ANY($1)`, accounts).Scan(&n); err != nil {
		return 0, classify(fmt.Errorf("ledger: count quarantined intents: %w", err))
	}
	return n, nil
}
