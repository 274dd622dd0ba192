package ownerauth_test

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
)

func TestStaticOwnerTokens(t *testing.T) {
	clk := newClock()
	now := clk.Now()
	revokedAt := now.Add(-time.Minute)
	store := &fakeTokens{}
	live := store.add(t, ledger.OwnerToken{ID: "otk_live", OwnerID: "own_alice", ExpiresAt: now.Add(time.Hour)})
	revoked := store.add(t, ledger.OwnerToken{ID: "otk_revoked", OwnerID: "own_alice", ExpiresAt: now.Add(time.Hour), RevokedAt: &revokedAt})
	expired := store.add(t, ledger.OwnerToken{ID: "otk_expired", OwnerID: "own_alice", ExpiresAt: now})
	unknown, _, err := ownerauth.MintToken()
	if err != nil {
		t.Fatal(err)
	}
	agent, _, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	a, err := ownerauth.New(ownerauth.Config{Now: clk.Now}, store)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		header  string
		wantErr error // nil = accepted as own_alice
		errHas  string
	}{
		{"live token", "Bearer " + live, nil, ""},
		{"surrounding spaces", "  Bearer   " + live + " ", nil, ""},
		{"revoked token", "Bearer " + revoked, ownerauth.ErrUnauthenticated, "revoked"},
		{"expired token (expiry is exclusive)", "Bearer " + expired, ownerauth.ErrUnauthenticated, "expired"},
		{"unknown token", "Bearer " + unknown, ownerauth.ErrUnauthenticated, "unknown owner token"},
		{"truncated token", "Bearer " + live[:len(live)-1], ownerauth.ErrUnauthenticated, "malformed"},
		{"not base32", "Bearer cso_" + strings.Repeat("!", len(live)-4), ownerauth.ErrUnauthenticated, "malformed"},
		{"no header", "", ownerauth.ErrUnauthenticated, "no credential"},
		{"empty bearer", "Bearer ", ownerauth.ErrUnauthenticated, ""},
		{"token without a scheme", live, ownerauth.ErrUnauthenticated, "Bearer"},
		{"another scheme", "Token " + live, ownerauth.ErrUnauthenticated, "scheme"},
		{"owner token as Basic", basic(live, ""), ownerauth.ErrUnauthenticated, "not Basic"},
		{"agent credential as Bearer", "Bearer " + agent, ownerauth.ErrAgentCredential, ""},
		{"agent credential bare", agent, ownerauth.ErrAgentCredential, ""},
		{"agent credential as Basic user (Razorpay style)", basic(agent, ""), ownerauth.ErrAgentCredential, ""},
		{"agent credential as Basic password", basic("rzp_key", agent), ownerauth.ErrAgentCredential, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := a.Authenticate(context.Background(), tc.header)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if o != (ownerauth.Owner{ID: "own_alice", Subject: "otk_live", Method: ownerauth.MethodToken}) {
					t.Fatalf("owner = %+v", o)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.errHas != "" && !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("err = %q, want it to mention %q", err, tc.errHas)
			}
			if strings.Contains(err.Error(), live[4:]) || strings.Contains(err.Error(), agent[4:]) {
				t.Fatalf("the error repeats a secret: %q", err)
			}
		})
	}
}

// An agent credential is refused before the ledger is asked anything.
func TestAnAgentCredentialIsNeverLookedUp(t *testing.T) {
	store := &fakeTokens{err: errors.New("the store must not be called")}
	a, err := ownerauth.New(ownerauth.Config{}, store)
	if err != nil {
		t.Fatal(err)
	}
	agent, _, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(context.Background(), "Bearer "+agent); !errors.Is(err, ownerauth.ErrAgentCredential) {
		t.Fatalf("err = %v, want ErrAgentCredential", err)
	}
}

// And the other way round: the agent path's credential.Hash refuses an
// owner token by its shape, so it can never be looked up as an agent.
func TestAnOwnerTokenIsNeverAnAgentCredential(t *testing.T) {
	secret, _, err := ownerauth.MintToken()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, ownerauth.TokenPrefix) || len(secret) != len(ownerauth.TokenPrefix)+52 {
		t.Fatalf("minted %q: want cso_ and 52 base32 characters (256 bits)", secret)
	}
	if _, err := credential.Hash(secret); !errors.Is(err, credential.ErrMalformed) {
		t.Fatalf("credential.Hash(owner token) = %v, want ErrMalformed", err)
	}
	again, _, _ := ownerauth.MintToken()
	if again == secret {
		t.Fatal("two mints gave the same secret")
	}
}

// A ledger that is down is not "unauthenticated": the caller may retry.
func TestALedgerFailureIsNotAnAuthenticationFailure(t *testing.T) {
	down := &fakeTokens{err: ledger.ErrUnavailable}
	a, err := ownerauth.New(ownerauth.Config{}, down)
	if err != nil {
		t.Fatal(err)
	}
	secret, _, _ := ownerauth.MintToken()
	_, err = a.Authenticate(context.Background(), "Bearer "+secret)
	if !errors.Is(err, ledger.ErrUnavailable) || errors.Is(err, ownerauth.ErrUnauthenticated) {
		t.Fatalf("err = %v, want ErrUnavailable alone", err)
	}
}
