package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/credential"
)

// Owner-scoped reads and writes for the owner API. Every query names the
// owner, so an owner can never see or touch another owner's agents.

const agentColumns = `id, owner_id, name, status = 'revoked', created_at, revoked_at`

func scanAgent(row pgx.Row) (Agent, error) {
	var a Agent
	err := row.Scan(&a.ID, &a.OwnerID, &a.Name, &a.Revoked, &a.CreatedAt, &a.RevokedAt)
	return a, err
}

// OwnerAgent returns ownerID's agent id.
func (s *Store) OwnerAgent(ctx context.Context, ownerID, id string) (Agent, error) {
	a, err := scanAgent(s.pool.QueryRow(ctx, `SELECT `+agentColumns+` FROM agents WHERE owner_id = $1 AND id = $2`, ownerID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Agent{}, fmt.Errorf("%w: agent %s", ErrNotFound, id)
	}
	return a, classify(err)
}

// OwnerAgents pages through ownerID's agents in id order, after the id
// after ("" from the start).
func (s *Store) OwnerAgents(ctx context.Context, ownerID, after string, limit int, withRevoked bool) ([]Agent, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+agentColumns+` FROM agents
		WHERE owner_id = $1 AND id > $2 AND ($4 OR status = 'active') ORDER BY id LIMIT $3`, ownerID, after, limit, withRevoked)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Agent, error) { return scanAgent(r) })
	return out, classify(err)
}

// AgentCredentials lists the safe metadata of an agent's credentials.
func (s *Store) AgentCredentials(ctx context.Context, ownerID, agentID, after string, limit int) ([]Credential, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT c.id, c.agent_id, c.scope, c.created_at, c.expires_at, c.revoked_at
		FROM credentials c JOIN agents a ON a.id = c.agent_id
		WHERE a.owner_id = $1 AND c.agent_id = $2 AND c.id > $3 ORDER BY c.id LIMIT $4`, ownerID, agentID, after, limit)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Credential, error) {
		var c Credential
		var scope string
		err := r.Scan(&c.ID, &c.AgentID, &scope, &c.CreatedAt, &c.ExpiresAt, &c.RevokedAt)
		c.Scope = credential.Scope(scope)
		return c, err
	})
	return out, classify(err)
}

// OwnerIntent returns an intent whose agent belongs to ownerID, with its
// attempts.
func (s *Store) OwnerIntent(ctx context.Context, ownerID string, k Key) (Intent, []Attempt, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM intents i JOIN agents a ON a.id = i.agent_id
		WHERE a.owner_id = $1 AND i.rail_account = $2 AND i.sik = $3)`, ownerID, k.RailAccount, k.SIK).Scan(&ok); err != nil {
		return Intent{}, nil, classify(err)
	}
	if !ok {
		return Intent{}, nil, fmt.Errorf("%w: intent %s", ErrNotFound, k)
	}
	return s.GetIntent(ctx, k)
}

// OwnerCredential checks that credential id belongs to agentID of ownerID.
func (s *Store) OwnerCredential(ctx context.Context, ownerID, agentID, id string) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM credentials c JOIN agents a ON a.id = c.agent_id
		WHERE a.owner_id = $1 AND c.agent_id = $2 AND c.id = $3)`, ownerID, agentID, id).Scan(&ok); err != nil {
		return classify(err)
	}
	if !ok {
		return fmt.Errorf("%w: credential %s of agent %s", ErrNotFound, id, agentID)
	}
	return nil
}

// IntentFilter narrows an owner's intents.
type IntentFilter struct {
	AgentID     string
	RailAccount string
	// Subject is honoured by OwnerIntents (an index on subject serves it,
	// migration 00016).
	Subject string
	States  []string
}

// OwnerIntents pages through an owner's intents, newest first, after the
// (created_at, rail_account, sik) position of the previous page's last one.
func (s *Store) OwnerIntents(ctx context.Context, ownerID string, f IntentFilter, after *Intent, limit int) ([]Intent, error) {
	var afterAt any
	afterAcct, afterSIK := "", ""
	if after != nil {
		afterAt, afterAcct, afterSIK = after.CreatedAt, after.RailAccount, after.SIK
	}
	rows, err := s.pool.Query(ctx, `SELECT `+intentColumns+` FROM intents
		WHERE agent_id IN (SELECT id FROM agents WHERE owner_id = $1)
		  AND ($2 = '' OR agent_id = $2) AND ($3 = '' OR rail_account = $3)
		  AND (COALESCE(cardinality($4::text[]), 0) = 0 OR state = ANY($4))
		  AND ($5::timestamptz IS NULL OR (created_at, rail_account, sik) < ($5, $6, $7))
		  AND ($9 = '' OR subject = $9)
		ORDER BY created_at DESC, rail_account DESC, sik DESC LIMIT $8`,
		ownerID, f.AgentID, f.RailAccount, f.States, afterAt, afterAcct, afterSIK, limit, f.Subject)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Intent, error) { return scanIntent(r) })
	return out, classify(err)
}

// Transition is one audited state change of an owner's intent.
type Transition struct {
	AuditRecord
	Intent Intent
}

// TransitionPos places an audit record in the order a watcher reads the
// log: by at_micros, ties broken by id.
type TransitionPos struct {
	AtMicros, ID int64
}

// ClockMicros is the ledger's clock now, in microseconds since the epoch:
// the clock audit records' at_micros are stamped with (by the triggers that
// write them), which a watcher's cursor must follow rather than its own
// process's clock.
func (s *Store) ClockMicros(ctx context.Context) (int64, error) {
	var at int64
	err := s.pool.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`).Scan(&at)
	return at, classify(err)
}

// OwnerTransitionPositions returns the positions of up to limit audited
// transitions of an owner's intents after the position after, in order:
// one keyset page. A watcher pages with it through a window behind its
// cursor (records commit out of their timestamp order: a transaction that
// began earlier commits later) and asks OwnerTransitions only for the
// records it has not sent; the positions are all it re-reads of the rest.
// The plain bound on at_micros, implied by the row comparison, is what
// the BRIN index on at_micros (migration 00041) can use.
func (s *Store) OwnerTransitionPositions(ctx context.Context, ownerID string, f IntentFilter, after TransitionPos, limit int) ([]TransitionPos, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT r.at_micros, r.id
		FROM audit_records r JOIN intents i ON i.rail_account = r.rail_account AND i.sik = r.sik
		WHERE i.agent_id IN (SELECT id FROM agents WHERE owner_id = $1)
		  AND ($2 = '' OR i.agent_id = $2) AND ($3 = '' OR i.rail_account = $3)
		  AND (COALESCE(cardinality($4::text[]), 0) = 0 OR r.to_state = ANY($4))
		  AND (r.at_micros, r.id) > ($5, $6) AND r.at_micros >= $5
		ORDER BY r.at_micros, r.id LIMIT $7`,
		ownerID, f.AgentID, f.RailAccount, f.States, after.AtMicros, after.ID, limit)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TransitionPos, error) {
		var p TransitionPos
		err := r.Scan(&p.AtMicros, &p.ID)
		return p, err
	})
	return out, classify(err)
}

// OwnerTransitions returns the audited transitions with the record ids
// that are of an owner's intents, each with its intent as it stands, in
// (at_micros, id) order, in one query.
func (s *Store) OwnerTransitions(ctx context.Context, ownerID string, ids []int64) ([]Transition, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+auditRecordColumns+`, i.*
		FROM audit_records r CROSS JOIN LATERAL (
			SELECT `+intentColumns+` FROM intents
			WHERE intents.rail_account = r.rail_account AND intents.sik = r.sik
			  AND intents.agent_id IN (SELECT id FROM agents WHERE owner_id = $1)) i
		WHERE r.id = ANY($2::bigint[])
		ORDER BY r.at_micros, r.id`, ownerID, ids)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Transition, error) {
		var t Transition
		a := &t.AuditRecord
		it, err := scanIntent(prefixedRow{row: r, prefix: []any{&a.ID, &a.RailAccount, &a.SIK, &a.FromState, &a.ToState,
			&a.Event, &a.AttemptSeq, &a.Detail, &a.AtMicros, &a.LeafIndex}})
		t.Intent = it
		return t, err
	})
	return out, classify(err)
}

// prefixedRow scans the columns before a row's last ones into prefix, so
// a scanner of those last columns (scanIntent) reads a joined row.
type prefixedRow struct {
	row    pgx.Row
	prefix []any
}

func (p prefixedRow) Scan(dest ...any) error {
	return p.row.Scan(append(append([]any{}, p.prefix...), dest...)...)
}

// AuditFilter narrows an owner's audit records ("" fields match all).
type AuditFilter struct {
	RailAccount, SIK string
}

// OwnerAuditRecords pages through the audit records of an owner's intents
// in record id order (the order they were written in), after afterID.
func (s *Store) OwnerAuditRecords(ctx context.Context, ownerID string, f AuditFilter, afterID int64, limit int) ([]AuditRecord, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+auditRecordColumns+`
		FROM audit_records r JOIN intents i ON i.rail_account = r.rail_account AND i.sik = r.sik
		WHERE i.agent_id IN (SELECT id FROM agents WHERE owner_id = $1)
		  AND r.rail_account IN (SELECT rail_account FROM rail_account_owners WHERE owner_id = $1 AND revoked_at IS NULL)
		  AND ($2 = '' OR r.rail_account = $2) AND ($3 = '' OR r.sik = $3)
		  AND r.id > $4
		ORDER BY r.id LIMIT $5`,
		ownerID, f.RailAccount, f.SIK, afterID, limit)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, scanAuditRecord)
	return out, classify(err)
}

// OwnerIntentSIKs returns the SIKs of ownerID's intents on railAccount.
func (s *Store) OwnerIntentSIKs(ctx context.Context, ownerID, railAccount string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT sik FROM intents
		WHERE rail_account = $2 AND agent_id IN (SELECT id FROM agents WHERE owner_id = $1)`, ownerID, railAccount)
	if err != nil {
		return nil, classify(err)
	}
	siks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, classify(err)
	}
	out := make(map[string]bool, len(siks))
	for _, s := range siks {
		out[s] = true
	}
	return out, nil
}
