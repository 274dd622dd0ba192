package ownerauth_test

import (
	"context"
	"errors"
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
