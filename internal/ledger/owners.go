package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/credential"
)

// Owner is a person or team with a static owner token. Owners who sign in
// through OIDC have no row (internal/ownerauth names them from their token).
type Owner struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// OwnerToken is the safe metadata of a static owner token; the secret itself
// is never stored, only its SHA-256.
type OwnerToken struct {
	ID        string
	OwnerID   string
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt *time.Time
}

// CreateOwner inserts a new owner.
func (s *Store) CreateOwner(ctx context.Context, name string) (Owner, error) {
	id, err := credential.NewID("own")
	if err != nil {
		return Owner{}, err
	}
	var o Owner
	err = s.pool.QueryRow(ctx, `
		INSERT INTO owners (id, name) VALUES ($1, $2) RETURNING id, name, created_at`, id, name).
		Scan(&o.ID, &o.Name, &o.CreatedAt)
	if err != nil {
		return Owner{}, classify(fmt.Errorf("ledger: create owner: %w", err))
	}
	return o, nil
}

// GetOwner returns the owner with id.
func (s *Store) GetOwner(ctx context.Context, id string) (Owner, error) {
	var o Owner
	err := s.pool.QueryRow(ctx, `SELECT id, name, created_at FROM owners WHERE id = $1`, id).
		Scan(&o.ID, &o.Name, &o.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Owner{}, fmt.Errorf("%w: owner %s", ErrNotFound, id)
	}
	if err != nil {
		return Owner{}, classify(fmt.Errorf("ledger: get owner: %w", err))
	}
	return o, nil
}

// IssueOwnerToken stores the hash of a new owner token. The ledger never sees
// the secret: ownerauth.IssueToken mints it, stores its hash here and shows it
// once.
func (s *Store) IssueOwnerToken(ctx context.Context, ownerID string, expiresAt time.Time, hash [32]byte) (OwnerToken, error) {
	id, err := credential.NewID("otk")
	if err != nil {
		return OwnerToken{}, err
	}
	t := OwnerToken{ID: id, OwnerID: ownerID}
	err = s.pool.QueryRow(ctx, `
		INSERT INTO owner_tokens (id, owner_id, token_hash, expires_at)
		SELECT $1, id, $3, $4 FROM owners WHERE id = $2
		RETURNING created_at, expires_at`, id, ownerID, hash[:], expiresAt).
		Scan(&t.CreatedAt, &t.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return OwnerToken{}, fmt.Errorf("%w: owner %s", ErrNotFound, ownerID)
	}
	if err != nil {
		return OwnerToken{}, classify(fmt.Errorf("ledger: issue owner token: %w", err))
	}
	return t, nil
}

// LookupOwnerToken resolves a token hash to its token, whatever its state:
// the authenticator decides what revoked or expired means.
func (s *Store) LookupOwnerToken(ctx context.Context, hash [32]byte) (OwnerToken, error) {
	var t OwnerToken
	err := s.pool.QueryRow(ctx, `
		SELECT id, owner_id, created_at, expires_at, revoked_at
		FROM owner_tokens WHERE token_hash = $1`, hash[:]).
		Scan(&t.ID, &t.OwnerID, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return OwnerToken{}, fmt.Errorf("%w: owner token", ErrNotFound)
	}
	if err != nil {
		return OwnerToken{}, classify(fmt.Errorf("ledger: lookup owner token: %w", err))
	}
	return t, nil
}

// ListOwnerTokens returns the safe metadata of an owner's tokens, newest
// first.
func (s *Store) ListOwnerTokens(ctx context.Context, ownerID string) ([]OwnerToken, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, owner_id, created_at, expires_at, revoked_at
		FROM owner_tokens WHERE owner_id = $1 ORDER BY created_at DESC, id`, ownerID)
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: list owner tokens: %w", err))
	}
	defer rows.Close()
	var out []OwnerToken
	for rows.Next() {
		var t OwnerToken
		if err := rows.Scan(&t.ID, &t.OwnerID, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt); err != nil {
			return nil, classify(fmt.Errorf("ledger: list owner tokens: %w", err))
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("ledger: list owner tokens: %w", err))
	}
	return out, nil
}

// RevokeOwnerToken revokes a token, one way. Revoking twice is a no-op.
func (s *Store) RevokeOwnerToken(ctx context.Context, id string) error {
	return s.revokeOnce(ctx, "owner_tokens", "owner token", id)
}

// revokeOnce sets revoked_at of row id of table (one of this package's
// own table names, never input) if it is not set yet: revocation is one
// way, and revoking twice is a no-op. An unknown id is ErrNotFound.
func (s *Store) revokeOnce(ctx context.Context, table, what, id string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE `+table+` SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1`, id)
	if err != nil {
		return classify(fmt.Errorf("ledger: revoke %s: %w", what, err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s %s", ErrNotFound, what, id)
	}
	return nil
}
