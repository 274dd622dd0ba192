package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestOwnerSessionLifecycle: a session is stored by its hash, carries the
// state of the token that opened it, is revoked one way, and the database
// refuses any other change and a lifetime over 24h.
func TestOwnerSessionLifecycle(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	o, err := s.CreateOwner(ctx, "ops")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.IssueOwnerToken(ctx, o.ID, time.Now().Add(time.Hour), sha256.Sum256([]byte("cso_session_test")))
	if err != nil {
		t.Fatal(err)
	}
	hash := sha256.Sum256([]byte("css_lifecycle"))
	expires := time.Now().Add(8 * time.Hour).Truncate(time.Microsecond)
	sess, err := s.CreateOwnerSession(ctx, o.ID, tok.ID, "token", expires, hash)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.LookupOwnerSession(ctx, hash)
	if err != nil || got.ID != sess.ID || got.OwnerID != o.ID || got.Subject != tok.ID || got.Method != "token" ||
		!got.ExpiresAt.Equal(expires) || got.RevokedAt != nil || got.TokenExpiresAt == nil || got.TokenRevokedAt != nil {
		t.Fatalf("LookupOwnerSession = %+v, %v", got, err)
	}
	if _, err := s.LookupOwnerSession(ctx, sha256.Sum256([]byte("css_other"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	if err := s.RevokeOwnerToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.LookupOwnerSession(ctx, hash); got.TokenRevokedAt == nil {
		t.Fatal("the session does not see its token's revocation")
	}
	if err := s.RevokeOwnerSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	first, _ := s.LookupOwnerSession(ctx, hash)
	if first.RevokedAt == nil {
		t.Fatal("revocation not recorded")
	}
	if err := s.RevokeOwnerSession(ctx, sess.ID); err != nil {
		t.Fatalf("revoking twice: %v", err)
	}
	if again, _ := s.LookupOwnerSession(ctx, hash); !again.RevokedAt.Equal(*first.RevokedAt) {
		t.Fatal("a second revocation moved revoked_at")
	}
	if err := s.RevokeOwnerSession(ctx, "oss_missing0000"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	for _, tc := range []struct{ name, sql string }{
		{"extend", `UPDATE owner_sessions SET expires_at = expires_at + interval '1 hour' WHERE id = $1`},
		{"move to another owner", `UPDATE owner_sessions SET owner_id = 'own_someoneelse' WHERE id = $1`},
		{"un-revoke", `UPDATE owner_sessions SET revoked_at = NULL WHERE id = $1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.pool.Exec(ctx, tc.sql, sess.ID); err == nil {
				t.Fatal("the database allowed it")
			}
		})
	}
	if _, err := s.CreateOwnerSession(ctx, o.ID, tok.ID, "token", time.Now().Add(26*time.Hour), sha256.Sum256([]byte("css_long"))); err == nil {
		t.Fatal("a 26h session was stored")
	}
	if _, err := s.CreateOwnerSession(ctx, o.ID, "not-a-token", "token", expires, sha256.Sum256([]byte("css_bad_subject"))); err == nil {
		t.Fatal("a token session without a token id was stored")
	}
	oidc, err := s.CreateOwnerSession(ctx, "oidc:0123456789ab:alice", "alice", "oidc", expires, sha256.Sum256([]byte("css_oidc")))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.LookupOwnerSession(ctx, sha256.Sum256([]byte("css_oidc"))); err != nil || got.ID != oidc.ID || got.TokenExpiresAt != nil {
		t.Fatalf("OIDC session = %+v, %v", got, err)
	}
}

// TestConsoleKeyIsShared: concurrent first callers all get the one key
// that was stored.
func TestConsoleKeyIsShared(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := s.ConsoleKey(ctx, "oidc_state", bytes.Repeat([]byte{byte(i + 1)}, 32))
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for i, k := range keys {
		if len(k) != 32 || !bytes.Equal(k, keys[0]) {
			t.Fatalf("caller %d got key %x, caller 0 %x", i, k, keys[0])
		}
	}
	if _, err := s.ConsoleKey(ctx, "oidc_state", []byte("short")); err == nil {
		t.Fatal("a short candidate was accepted")
	}
}

// TestTrimOwnerSessions: after a new session, an owner keeps its newest
// live sessions up to the bound (the new one always among them); older
// ones are revoked, and another owner's, or already ended ones, are not
// touched.
func TestTrimOwnerSessions(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	open := func(owner, name string, expires time.Time) OwnerSession {
		t.Helper()
		sess, err := s.CreateOwnerSession(ctx, owner, name, "oidc", expires, sha256.Sum256([]byte("css_trim_"+owner+name)))
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
	live := func(sess OwnerSession, owner, name string) bool {
		t.Helper()
		got, err := s.LookupOwnerSession(ctx, sha256.Sum256([]byte("css_trim_"+owner+name)))
		if err != nil || got.ID != sess.ID {
			t.Fatalf("lookup %s: %+v, %v", name, got, err)
		}
		return got.RevokedAt == nil
	}
	const a, b = "oidc:0123456789ab:alice", "oidc:0123456789ab:bob"
	later := time.Now().Add(time.Hour)
	ended := open(a, "ended", time.Now().Add(time.Hour))
	if err := s.RevokeOwnerSession(ctx, ended.ID); err != nil {
		t.Fatal(err)
	}
	bobs := open(b, "bob", later)
	var alices []OwnerSession
	for i := range 5 {
		alices = append(alices, open(a, string(rune('0'+i)), later))
	}
	// The newest is the one just opened; keep 3 of alice's.
	n, err := s.TrimOwnerSessions(ctx, a, alices[4].ID, 3)
	if err != nil || n != 2 {
		t.Fatalf("TrimOwnerSessions = %d, %v; want 2 revoked", n, err)
	}
	for i, sess := range alices {
		if got, want := live(sess, a, string(rune('0'+i))), i >= 2; got != want {
			t.Errorf("alice's session %d live = %v, want %v", i, got, want)
		}
	}
	if !live(bobs, b, "bob") {
		t.Error("another owner's session was revoked")
	}
	// The session named as the new one stays, even when it is not the newest.
	if n, err := s.TrimOwnerSessions(ctx, a, alices[2].ID, 1); err != nil || n != 2 || !live(alices[2], a, "2") || live(alices[4], a, "4") {
		t.Fatalf("keep 1 = %d, %v; the named session must be the one kept", n, err)
	}
	if _, err := s.TrimOwnerSessions(ctx, a, alices[2].ID, 0); err == nil {
		t.Error("keep 0 accepted")
	}
}
