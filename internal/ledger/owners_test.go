package ledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestOwnerTokenLifecycle(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	o, err := s.CreateOwner(ctx, "ops")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetOwner(ctx, o.ID); err != nil || got.Name != "ops" || got.ID != o.ID || got.CreatedAt.IsZero() {
		t.Fatalf("GetOwner = %+v, %v", got, err)
	}
	hash := sha256.Sum256([]byte("cso_lifecycle"))
	expires := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	tok, err := s.IssueOwnerToken(ctx, o.ID, expires, hash)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.LookupOwnerToken(ctx, hash)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != tok.ID || got.OwnerID != o.ID || !got.ExpiresAt.Equal(expires) || got.RevokedAt != nil {
		t.Fatalf("LookupOwnerToken = %+v, want %+v", got, tok)
	}
	if err := s.RevokeOwnerToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	first, err := s.LookupOwnerToken(ctx, hash)
	if err != nil || first.RevokedAt == nil {
		t.Fatalf("after revoke: %+v, %v; want revoked", first, err)
	}
	if err := s.RevokeOwnerToken(ctx, tok.ID); err != nil {
		t.Fatalf("second revoke = %v, want a no-op", err)
	}
	second, err := s.LookupOwnerToken(ctx, hash)
	if err != nil || !second.RevokedAt.Equal(*first.RevokedAt) {
		t.Fatalf("second revoke moved revoked_at: %v -> %v (%v)", first.RevokedAt, second.RevokedAt, err)
	}
	list, err := s.ListOwnerTokens(ctx, o.ID)
	if err != nil || len(list) != 1 || list[0].ID != tok.ID || list[0].RevokedAt == nil {
		t.Fatalf("ListOwnerTokens = %+v, %v", list, err)
	}
}

func TestOwnerTokenNotFound(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{"lookup of an unknown hash", func() error {
			_, err := s.LookupOwnerToken(ctx, sha256.Sum256([]byte("cso_unknown")))
			return err
		}},
		{"issue for an unknown owner", func() error {
			_, err := s.IssueOwnerToken(ctx, "own_aaaaaaaaaaaaaaaaaaaa", time.Now().Add(time.Hour), sha256.Sum256([]byte("x")))
			return err
		}},
		{"revoke of an unknown token", func() error { return s.RevokeOwnerToken(ctx, "otk_aaaaaaaaaaaaaaaaaaaa") }},
		{"get of an unknown owner", func() error {
			_, err := s.GetOwner(ctx, "own_aaaaaaaaaaaaaaaaaaaa")
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
		})
	}
}

// The schema itself refuses what the Go code never does: a second token with
// the same hash, an un-revocation, a rewritten token, a deletion.
func TestOwnerTokenSchemaGuards(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	o, err := s.CreateOwner(ctx, "guards")
	if err != nil {
		t.Fatal(err)
	}
	hash := sha256.Sum256([]byte("cso_guards"))
	tok, err := s.IssueOwnerToken(ctx, o.ID, time.Now().Add(time.Hour), hash)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.IssueOwnerToken(ctx, o.ID, time.Now().Add(time.Hour), hash); !isPgCode(err, "23505") {
		t.Fatalf("duplicate hash: err = %v, want unique_violation", err)
	}
	other, err := s.CreateOwner(ctx, "someone else")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeOwnerToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, sql, code string
	}{
		{"un-revoke", `UPDATE owner_tokens SET revoked_at = NULL WHERE id = $1`, "23514"},
		{"move the revocation", `UPDATE owner_tokens SET revoked_at = revoked_at + interval '1 day' WHERE id = $1`, "23514"},
		{"extend the expiry", `UPDATE owner_tokens SET expires_at = expires_at + interval '1 year' WHERE id = $1`, "23514"},
		{"hand to another owner", `UPDATE owner_tokens SET owner_id = '` + other.ID + `' WHERE id = $1`, "23514"},
		{"delete", `DELETE FROM owner_tokens WHERE id = $1`, "42501"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.pool.Exec(ctx, tc.sql, tok.ID)
			if !isPgCode(err, tc.code) {
				t.Fatalf("err = %v, want SQLSTATE %s", err, tc.code)
			}
		})
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO owner_tokens (id, owner_id, token_hash, expires_at, revoked_at)
		VALUES ('otk_bornrevoked', $1, $2, now() + interval '1 hour', now())`, o.ID, make([]byte, 32)); !isPgCode(err, "23514") {
		t.Fatalf("born revoked: err = %v, want check_violation", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO owner_tokens (id, owner_id, token_hash, expires_at)
		VALUES ('otk_pastexpiry', $1, $2, now() - interval '1 hour')`, o.ID, make([]byte, 32)); !isPgCode(err, "23514") {
		t.Fatalf("expired at birth: err = %v, want check_violation", err)
	}
}

func isPgCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}
