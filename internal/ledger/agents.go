package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/credential"
)

// Agent is an AI agent an owner lets propose or move money.
type Agent struct {
	ID        string
	OwnerID   string
	Name      string
	Revoked   bool
	CreatedAt time.Time
	RevokedAt *time.Time
}

// Credential is the safe metadata of an agent credential; the secret itself
// is never stored.
type Credential struct {
	ID        string
	AgentID   string
	Scope     credential.Scope
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt *time.Time
}

// Principal is what a presented credential resolves to on the hot path.
type Principal struct {
	Credential Credential
	Agent      Agent
}

// CreateAgent inserts a new active agent for ownerID.
func (s *Store) CreateAgent(ctx context.Context, ownerID, name string) (Agent, error) {
	id, err := credential.NewID("agt")
	if err != nil {
		return Agent{}, err
	}
	var a Agent
	err = s.pool.QueryRow(ctx, `
		INSERT INTO agents (id, owner_id, name) VALUES ($1, $2, $3)
		RETURNING id, owner_id, name, created_at`, id, ownerID, name).
		Scan(&a.ID, &a.OwnerID, &a.Name, &a.CreatedAt)
	if err != nil {
		return Agent{}, classify(fmt.Errorf("ledger: create agent: %w", err))
	}
	return a, nil
}

// IssueCredential stores the hash of a new credential for agentID. The
// caller shows the secret once and forgets it.
func (s *Store) IssueCredential(ctx context.Context, agentID string, scope credential.Scope, expiresAt time.Time, hash [32]byte) (Credential, error) {
	if !scope.Valid() {
		return Credential{}, fmt.Errorf("ledger: issue credential: unknown scope %q", scope)
	}
	id, err := credential.NewID("crd")
	if err != nil {
		return Credential{}, err
	}
	c := Credential{ID: id, AgentID: agentID, Scope: scope}
	err = s.pool.QueryRow(ctx, `
		INSERT INTO credentials (id, agent_id, secret_hash, scope, expires_at)
		SELECT $1, id, $3, $4, $5 FROM agents WHERE id = $2 AND status = 'active'
		RETURNING created_at, expires_at`, id, agentID, hash[:], string(scope), expiresAt).
		Scan(&c.CreatedAt, &c.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Credential{}, fmt.Errorf("%w: active agent %s", ErrNotFound, agentID)
	}
	if err != nil {
		return Credential{}, classify(fmt.Errorf("ledger: issue credential: %w", err))
	}
	return c, nil
}

// RevokeCredential revokes a credential, one way. Revoking twice is a no-op.
func (s *Store) RevokeCredential(ctx context.Context, id string) error {
	return s.revokeOfAgent(ctx, "credential", id, `SELECT agent_id FROM credentials WHERE id = $1`,
		`UPDATE credentials SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1`)
}

// RevokeAgent revokes an agent, one way. Its credentials stop working with
// it, and its approvals are void in the same transaction.
func (s *Store) RevokeAgent(ctx context.Context, id string) error {
	return s.revokeOfAgent(ctx, "agent", id, `SELECT $1::text`,
		`UPDATE agents SET status = 'revoked', revoked_at = COALESCE(revoked_at, now()) WHERE id = $1`,
		`UPDATE approvals SET state = 'void' WHERE agent_id = $1 AND state IN ('pending', 'approved')`)
}

// The revocation lock of an agent: every decision of the agent holds it
// shared from its first statement to its commit; a revocation of the
// agent, its credential or its mandate takes it exclusively before its
// UPDATE. Advisory locks queue in order, so a waiting revocation holds
// back the decisions that come after it; the share row locks decisions
// take on those rows do not (a new share lock is granted beside the old
// ones while an UPDATE waits), so without this an agent deciding fast
// enough kept its owner's revocation waiting for as long as it kept on.
var (
	agentLockShared    = agentLock("pg_advisory_xact_lock_shared", "$1")
	agentLockExclusive = agentLock("pg_advisory_xact_lock", "$1")
)

// agentLock is the call of fn (an advisory lock function) on the
// revocation lock of the agent whose id is the SQL expression agent.
func agentLock(fn, agent string) string {
	return fn + `(hashtextextended('countersign.agent/' || ` + agent + `, 0))`
}

// revokeOfAgent runs a revocation (update, of the row with id) after the
// exclusive revocation lock of the agent agentOf names, in one
// transaction; ErrNotFound when agentOf finds nothing or update changes
// no row.
func (s *Store) revokeOfAgent(ctx context.Context, what, id, agentOf, update string, then ...string) error {
	err := s.inTx(ctx, OpRevoke, func(tx *Tx) error {
		var agent string
		switch err := tx.tx.QueryRow(ctx, agentOf, id).Scan(&agent); {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: %s %s", ErrNotFound, what, id)
		case err != nil:
			return err
		}
		if _, err := tx.tx.Exec(ctx, `SELECT `+agentLockExclusive, agent); err != nil {
			return err
		}
		tag, err := tx.tx.Exec(ctx, update, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: %s %s", ErrNotFound, what, id)
		}
		for _, sql := range then {
			if _, err := tx.tx.Exec(ctx, sql, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return classify(fmt.Errorf("ledger: revoke %s: %w", what, err))
	}
	return err
}

// LookupCredential resolves a credential hash to its credential and agent,
// whatever their state: the scope gate decides what revoked or expired means.
func (s *Store) LookupCredential(ctx context.Context, hash [32]byte) (Principal, error) {
	p, err := scanPrincipal(s.pool.QueryRow(ctx, principalSelect+`
		WHERE c.secret_hash = $1`, hash[:]))
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, fmt.Errorf("%w: credential", ErrNotFound)
	}
	if err != nil {
		return Principal{}, classify(fmt.Errorf("ledger: lookup credential: %w", err))
	}
	return p, nil
}
