package ownerauth_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
)

// fakeSessions is a TokenStore that is also a SessionStore.
type fakeSessions struct {
	fakeTokens
	sessions map[[32]byte]ledger.OwnerSession
}

func (f *fakeSessions) LookupOwnerSession(_ context.Context, hash [32]byte) (ledger.OwnerSession, error) {
	if s, ok := f.sessions[hash]; ok {
		return s, nil
	}
	return ledger.OwnerSession{}, ledger.ErrNotFound
}

func (f *fakeSessions) add(t *testing.T, s ledger.OwnerSession) string {
	t.Helper()
	secret, hash, err := ownerauth.MintSession()
	if err != nil {
		t.Fatal(err)
	}
	if f.sessions == nil {
		f.sessions = map[[32]byte]ledger.OwnerSession{}
	}
	f.sessions[hash] = s
	return secret.Whole()
}

// TestSessionCredential: "Bearer css_…" is looked up as a console
// session and refused when unknown, signed out, expired, or when the owner
// token that opened it is revoked or expired.
func TestSessionCredential(t *testing.T) {
	clock := newClock()
	now := clock.Now()
	later, earlier := now.Add(time.Hour), now.Add(-time.Second)
	store := &fakeSessions{}
	live := ledger.OwnerSession{ID: "oss_live", OwnerID: "own_alice", Subject: "otk_live", Method: "token", ExpiresAt: later, TokenExpiresAt: &later}
	a, err := ownerauth.New(ownerauth.Config{Now: clock.Now}, store)
	if err != nil {
		t.Fatal(err)
	}
	ok := store.add(t, live)
	signedOut := live
	signedOut.RevokedAt = &earlier
	expired := live
	expired.ExpiresAt = now
	tokenRevoked := live
	tokenRevoked.TokenRevokedAt = &earlier
	tokenExpired := live
	tokenExpired.TokenExpiresAt = &earlier
	noToken := live
	noToken.TokenExpiresAt = nil
	oidc := ledger.OwnerSession{ID: "oss_oidc", OwnerID: "oidc:abc:alice", Subject: "alice", Method: "oidc", ExpiresAt: later}
	for _, tc := range []struct {
		name   string
		secret string
		errHas string // empty: admitted
	}{
		{"live", ok, ""},
		// OIDC is off here: an OIDC session is refused (TestAnOIDCSessionFollowsTheAllowlist).
		{"oidc, OIDC off", store.add(t, oidc), "OIDC, which is now off"},
		{"signed out", store.add(t, signedOut), "signed out"},
		{"expired", store.add(t, expired), "expired"},
		{"token revoked", store.add(t, tokenRevoked), "is revoked"},
		{"token expired", store.add(t, tokenExpired), "expired"},
		{"token missing", store.add(t, noToken), "names no owner token"},
		{"unknown", "css_" + strings.Repeat("a", 52) + "." + strings.Repeat("a", 52), "unknown console session"},
		{"malformed", "css_short", "malformed console session"},
		// The cookie half alone (what every port of the host is sent), and
		// a secret of the one-part form sessions had before: refused, and
		// the refusal says to sign in again.
		{"cookie half alone", strings.SplitN(ok, ".", 2)[0], "without its key half"},
		{"one-part form", "css_" + strings.Repeat("a", 52), "sign in to the console again"},
		{"key half alone", strings.SplitN(ok, ".", 2)[1], "not an owner token"},
		{"halves swapped", "css_" + strings.SplitN(ok, ".", 2)[1] + "." + strings.SplitN(ok, ".", 2)[0][4:], "unknown console session"},
		{"another separator", strings.Replace(ok, ".", "_", 1), "malformed console session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := a.Authenticate(context.Background(), "Bearer "+tc.secret)
			if tc.errHas == "" {
				if err != nil || o.ID == "" {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ownerauth.ErrUnauthenticated) || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("err = %v, want ErrUnauthenticated with %q", err, tc.errHas)
			}
		})
	}
	// Without a session store a session is refused, never guessed at.
	b, err := ownerauth.New(ownerauth.Config{}, &fakeTokens{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Authenticate(context.Background(), "Bearer "+ok); !errors.Is(err, ownerauth.ErrUnauthenticated) {
		t.Fatalf("session without a session store: %v", err)
	}
}

// TestSessionSecretsAndCSRF: a session secret is two halves of 256 bits
// each, the cookie half with its own prefix; either half alone, or any
// other spelling of the whole, is refused; the CSRF token is the whole
// secret's alone.
func TestSessionSecretsAndCSRF(t *testing.T) {
	m1, h1, err := ownerauth.MintSession()
	if err != nil {
		t.Fatal(err)
	}
	m2, _, _ := ownerauth.MintSession()
	s1, s2 := m1.Whole(), m2.Whole()
	if !strings.HasPrefix(m1.Cookie, ownerauth.SessionPrefix) || len(m1.Cookie) != len(ownerauth.SessionPrefix)+52 || len(m1.Key) != 52 ||
		s1 != m1.Cookie+"."+m1.Key || m1.Cookie == m2.Cookie || m1.Key == m2.Key || strings.Contains(m1.Cookie, m1.Key[4:]) {
		t.Fatalf("minted %+v, %+v", m1, m2)
	}
	if !ownerauth.ValidSessionCookie(m1.Cookie) || !ownerauth.ValidSessionKey(m1.Key) || ownerauth.ValidSessionCookie(m1.Key) || ownerauth.ValidSessionKey(m1.Cookie) {
		t.Fatal("the halves are not told apart")
	}
	if j, err := ownerauth.JoinSession(m1.Cookie, m1.Key); err != nil || j != s1 {
		t.Fatalf("JoinSession = %q, %v", j, err)
	}
	if h, err := ownerauth.HashSession(s1); err != nil || h != h1 {
		t.Fatalf("HashSession = %x, %v", h, err)
	}
	// A base32 character whose last bits are not zero spells the same bytes
	// as another to a lenient decoder: refused, so each half has one spelling.
	stray := m1.Key[:51] + string("abcdefghijklmnopqrstuvwxyz234567"[strings.IndexByte("abcdefghijklmnopqrstuvwxyz234567", m1.Key[51])^1])
	for _, bad := range []string{"cso_" + s1[4:], s1[:len(s1)-1], s1 + "a", strings.ToUpper(s1), m1.Cookie, m1.Key, m1.Cookie + "." + m2.Key[:51],
		m1.Cookie + ".." + m1.Key[1:], m1.Cookie + " " + m1.Key, m1.Cookie + "." + stray, m1.Cookie + "." + strings.ToUpper(m1.Key)} {
		if _, err := ownerauth.HashSession(bad); err == nil {
			t.Errorf("HashSession(%q) accepted", bad)
		}
	}
	for _, bad := range [][2]string{{m1.Cookie, ""}, {"", m1.Key}, {m1.Key, m1.Cookie}, {m1.Cookie, stray}, {m1.Cookie + " ", m1.Key}, {s1, m1.Key}} {
		if j, err := ownerauth.JoinSession(bad[0], bad[1]); err == nil {
			t.Errorf("JoinSession(%q, %q) = %q", bad[0], bad[1], j)
		}
	}
	if _, err := credential.Hash(s1); err == nil {
		t.Error("a session secret is accepted as an agent credential")
	}
	c1 := ownerauth.CSRFToken(s1)
	if c1 != ownerauth.CSRFToken(s1) || c1 == ownerauth.CSRFToken(s2) || c1 == ownerauth.CSRFToken(m1.Cookie) || strings.Contains(c1, s1[4:]) {
		t.Fatalf("CSRF tokens %q, %q", c1, ownerauth.CSRFToken(s2))
	}
	if !ownerauth.CheckCSRF(s1, c1) || ownerauth.CheckCSRF(s2, c1) || ownerauth.CheckCSRF(s1, "") {
		t.Fatal("CheckCSRF")
	}
}

// TestSignInToken: only an owner token opens a session.
func TestSignInToken(t *testing.T) {
	clock := newClock()
	store := &fakeSessions{}
	expires := clock.Now().Add(time.Hour)
	token := store.fakeTokens.add(t, ledger.OwnerToken{ID: "otk_live", OwnerID: "own_alice", ExpiresAt: expires})
	a, err := ownerauth.New(ownerauth.Config{Now: clock.Now}, store)
	if err != nil {
		t.Fatal(err)
	}
	o, exp, err := a.SignInToken(context.Background(), token)
	if err != nil || o.ID != "own_alice" || !exp.Equal(expires) {
		t.Fatalf("SignInToken = %+v %v %v", o, exp, err)
	}
	agent, _, _ := credential.Generate()
	minted, _, _ := ownerauth.MintSession()
	session := minted.Whole()
	for _, tc := range []struct {
		name, token string
		want        error
	}{
		{"agent credential", agent, ownerauth.ErrAgentCredential},
		{"session", session, ownerauth.ErrUnauthenticated},
		{"JWT-shaped", "eyJhbGciOiJSUzI1NiJ9.e30.sig", ownerauth.ErrUnauthenticated},
	} {
		if _, _, err := a.SignInToken(context.Background(), tc.token); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
