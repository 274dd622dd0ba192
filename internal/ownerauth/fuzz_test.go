package ownerauth_test

import (
	"context"
	"encoding/base32"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
)

// FuzzAuthenticate feeds arbitrary Authorization headers to an
// authenticator with both static tokens and OIDC on. None may panic, and
// none but the one live token may get in: every refusal is one of the two
// sentinels.
func FuzzAuthenticate(f *testing.F) {
	rsaK, ecK, _, _ := testKeys(f)
	clk := newClock()
	store := &fakeTokens{}
	live := store.add(f, ledger.OwnerToken{ID: "otk_live", OwnerID: "own_alice", ExpiresAt: clk.Now().Add(time.Hour)})
	path := writeJWKSFile(f, jwks(f, rsaK, ecK))
	a, err := ownerauth.New(ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSFile: path, Now: clk.Now}, store)
	if err != nil {
		f.Fatal(err)
	}
	valid := sign(f, rsaK, claimsAt(clk.Now(), "alice"))
	for _, seed := range []string{
		"", "Bearer", "Bearer " + live, "Bearer " + valid, "bearer " + valid + "x", "Basic Y3NrXzp4",
		"Bearer csk_aaaa", "csk_", "Bearer cso_" + live[4:10], "Bearer e30.e30.", "Bearer " + unsigned(f, claimsAt(clk.Now(), "x")),
		"Bearer a.b.c.d.e", "Bearer \x00\xff",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		o, err := a.Authenticate(context.Background(), header)
		if err != nil {
			if !errors.Is(err, ownerauth.ErrUnauthenticated) && !errors.Is(err, ownerauth.ErrAgentCredential) {
				t.Fatalf("refusal %v is neither sentinel", err)
			}
			return
		}
		switch o.Method {
		case ownerauth.MethodToken:
			if o.ID != "own_alice" {
				t.Fatalf("token owner %+v", o)
			}
		case ownerauth.MethodOIDC:
			if o.Subject != "alice" {
				t.Fatalf("OIDC owner %+v from %q", o, header)
			}
		default:
			t.Fatalf("admitted %+v", o)
		}
	})
}

// FuzzSessionSecret: whatever the halves, JoinSession and HashSession
// answer without panicking; a whole they accept is exactly a well-formed
// cookie half, ".", and a well-formed key half (one spelling each), and
// the two agree: JoinSession accepts exactly the halves of a whole
// HashSession accepts.
func FuzzSessionSecret(f *testing.F) {
	m, _, err := ownerauth.MintSession()
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][2]string{{m.Cookie, m.Key}, {m.Cookie, ""}, {"", m.Key}, {m.Key, m.Cookie}, {m.Cookie, m.Key[:51] + "b"},
		{"css_" + m.Key, m.Key}, {m.Cookie + ".", m.Key}, {strings.ToUpper(m.Cookie), m.Key}, {m.Cookie, "\x00" + m.Key[1:]}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, cookie, key string) {
		whole, jerr := ownerauth.JoinSession(cookie, key)
		_, herr := ownerauth.HashSession(cookie + "." + key)
		if (jerr == nil) != (herr == nil) {
			t.Fatalf("JoinSession(%q, %q) = %v but HashSession of the whole = %v", cookie, key, jerr, herr)
		}
		if jerr != nil {
			return
		}
		if whole != cookie+"."+key || !strings.HasPrefix(cookie, ownerauth.SessionPrefix) || len(cookie) != 56 || len(key) != 52 {
			t.Fatalf("accepted %q + %q as %q", cookie, key, whole)
		}
		for _, part := range []string{cookie[4:], key} {
			b, err := base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding).DecodeString(part)
			if err != nil || len(b) != 32 {
				t.Fatalf("accepted half %q: %v", part, err)
			}
		}
		if ownerauth.ValidSessionCookie(key) || ownerauth.ValidSessionKey(cookie) {
			t.Fatalf("a half passes for the other: %q %q", cookie, key)
		}
	})
}
