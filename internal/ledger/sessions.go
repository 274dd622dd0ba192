package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/credential"
)

// OwnerSession is an owner console session: the safe metadata of a session
// whose secret only the owner's browser holds (the ledger keeps its SHA-256).
type OwnerSession struct {
	ID      string
	OwnerID string
	// Subject is the owner token id ("otk_…") for method "token", the OIDC
	// subject for "oidc".
	Subject   string
	Method    string
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt *time.Time
	// TokenRevokedAt and TokenExpiresAt are those of the owner token the
	// session was opened with (method "token"; nil otherwise): a session
	// never outlives the credential that opened it.
	TokenRevokedAt *time.Time
	TokenExpiresAt *time.Time
}

// CreateOwnerSession stores the hash of a new session's secret. The ledger
// never sees the secret (ownerauth.StartSession mints it).
func (s *Store) CreateOwnerSession(ctx context.Context, ownerID, subject, method string, expiresAt time.Time, hash [32]byte) (OwnerSession, error) {
	id, err := credential.NewID("oss")
	if err != nil {
		return OwnerSession{}, err
	}
	o := OwnerSession{ID: id, OwnerID: ownerID, Subject: subject, Method: method}
	err = s.pool.QueryRow(ctx, `
		INSERT INTO owner_sessions (id, secret_hash, owner_id, subject, method, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		RETURNING created_at, expires_at`, id, hash[:], ownerID, subject, method, expiresAt).
		Scan(&o.CreatedAt, &o.ExpiresAt)
	if err != nil {
		return OwnerSession{}, classify(fmt.Errorf("ledger: create owner session: %w", err))
	}
	return o, nil
}

// LookupOwnerSession resolves a session secret's hash to its session,
// whatever its state, with the state of the owner token that opened it:
// the authenticator decides what revoked or expired means.
func (s *Store) LookupOwnerSession(ctx context.Context, hash [32]byte) (OwnerSession, error) {
	var o OwnerSession
	err := s.pool.QueryRow(ctx, `
		SELECT s.id, s.owner_id, s.subject, s.method, s.created_at, s.expires_at, s.revoked_at,
		       t.revoked_at, t.expires_at
		FROM owner_sessions s
		LEFT JOIN owner_tokens t ON s.method = 'token' AND t.id = s.subject
		WHERE s.secret_hash = $1`, hash[:]).
		Scan(&o.ID, &o.OwnerID, &o.Subject, &o.Method, &o.CreatedAt, &o.ExpiresAt, &o.RevokedAt,
			&o.TokenRevokedAt, &o.TokenExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return OwnerSession{}, fmt.Errorf("%w: owner session", ErrNotFound)
	}
	if err != nil {
		return OwnerSession{}, classify(fmt.Errorf("ledger: lookup owner session: %w", err))
	}
	return o, nil
}

// RevokeOwnerSession revokes a session, one way. Revoking twice is a no-op.
func (s *Store) RevokeOwnerSession(ctx context.Context, id string) error {
	return s.revokeOnce(ctx, "owner_sessions", "owner session", id)
}

// TrimOwnerSessions revokes ownerID's live sessions (not revoked, not
// expired) other than keepID, newest first kept, beyond the newest keep-1
// of them: with keepID, the session just opened, keep stay live. It
// returns how many it revoked. Run after each new session, it bounds how
// many sessions one owner holds at once, whatever other replicas do.
func (s *Store) TrimOwnerSessions(ctx context.Context, ownerID, keepID string, keep int) (int64, error) {
	if keep < 1 {
		return 0, fmt.Errorf("ledger: trim owner sessions: keep must be at least 1, got %d", keep)
	}
	tag, err := s.pool.Exec(ctx, `
		UPDATE owner_sessions SET revoked_at = now()
		WHERE id IN (
			SELECT id FROM owner_sessions
			WHERE owner_id = $1 AND id <> $2 AND revoked_at IS NULL AND expires_at > now()
			ORDER BY created_at DESC, id DESC
			OFFSET $3)
		AND revoked_at IS NULL`, ownerID, keepID, keep-1)
	if err != nil {
		return 0, classify(fmt.Errorf("ledger: trim owner sessions: %w", err))
	}
	return tag.RowsAffected(), nil
}

// ConsoleKey returns the 32-byte key named name that every replica shares,
// storing candidate as that key if there is none yet (the first caller's
// candidate wins; later candidates are discarded).
func (s *Store) ConsoleKey(ctx context.Context, name string, candidate []byte) ([]byte, error) {
	if len(candidate) != 32 {
		return nil, fmt.Errorf("ledger: console key %s: a candidate key must be 32 bytes, got %d", name, len(candidate))
	}
	// A concurrent first insert can leave this statement's snapshot with
	// neither its own row nor the winner's: ask again, once the winner
	// has committed.
	var key []byte
	var err error
	for range 3 {
		key, err = s.consoleKey(ctx, name, candidate)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: console key %s: %w", name, err))
	}
	return key, nil
}

func (s *Store) consoleKey(ctx context.Context, name string, candidate []byte) ([]byte, error) {
	var key []byte
	err := s.pool.QueryRow(ctx, `
		WITH ins AS (
			INSERT INTO console_keys (name, key) VALUES ($1, $2)
			ON CONFLICT (name) DO NOTHING RETURNING key)
		SELECT key FROM ins
		UNION ALL
		SELECT key FROM console_keys WHERE name = $1
		LIMIT 1`, name, candidate).Scan(&key)
	return key, err
}
