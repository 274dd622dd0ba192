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
