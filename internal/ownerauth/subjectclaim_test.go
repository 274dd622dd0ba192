package ownerauth_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/ownerauth"
)

// TestSubjectClaimMustNameOneUser: the owner id is built from the subject
// claim alone, so only a claim that names one user of the issuer may be
// it. Profile claims (preferred_username, name, nickname) are not unique
// and users often edit them: a configuration naming one must not start.
func TestSubjectClaimMustNameOneUser(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	file := writeJWKSFile(t, jwks(t, rsaK))
	for _, tc := range []struct {
		claim   string
		refused bool
	}{
		{"", false},
		{"sub", false},
		{"email", false},
		{"preferred_username", true},
		{"name", true},
		{"nickname", true},
		{"given_name", true},
		{"upn", true},
		{"Sub", true},
		{"email ", true},
	} {
		t.Run(tc.claim, func(t *testing.T) {
			cfg := ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners,
				JWKSFile: file, SubjectClaim: tc.claim}
			verr := cfg.Validate()
			_, nerr := ownerauth.New(cfg, &fakeTokens{})
			if !tc.refused {
				if verr != nil || nerr != nil {
					t.Fatalf("Validate() = %v, New() = %v; want accepted", verr, nerr)
				}
				return
			}
			for _, err := range []error{verr, nerr} {
				if err == nil {
					t.Fatal("accepted; want refused at configuration")
				}
				msg := err.Error()
				if !strings.Contains(msg, `owner-subject-claim "`+tc.claim+`" is refused`) || !strings.Contains(msg, "unique") {
					t.Fatalf("err = %q; want it to name the claim and why it is refused", msg)
				}
			}
		})
	}
}

// TestOIDCScopesNeverAskForProfile: with no profile claim able to name an
// owner, the sign-in asks for no profile scope.
func TestOIDCScopesNeverAskForProfile(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	body := jwks(t, rsaK)
	clk := newClock()
	for _, tc := range []struct {
		name   string
		mutate func(*ownerauth.Config)
		want   []string
	}{
		{"sub", nil, []string{"openid"}},
		{"email", func(c *ownerauth.Config) { c.SubjectClaim = "email" }, []string{"openid", "email"}},
		{"groups", func(c *ownerauth.Config) { c.AllowedGroups = []string{"payments-owners"} }, []string{"openid", "groups"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newOIDC(t, clk, "file", body, tc.mutate).OIDCScopes()
			if !slices.Equal(got, tc.want) {
				t.Fatalf("scopes = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestUnverifiedEmailCannotJoinAVerifiedOwner: with email naming owners,
// a second user of the issuer (another sub) presenting the same address
// unverified is refused, rather than becoming the verified user's owner.
func TestUnverifiedEmailCannotJoinAVerifiedOwner(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	clk := newClock()
	a := newOIDC(t, clk, "file", jwks(t, rsaK), func(c *ownerauth.Config) {
		c.SubjectClaim, c.AllowedGroups, c.AllowedSubjects = "email", []string{"payments-owners"}, nil
	})
	claims := func(sub string, verified bool) map[string]any {
		c := with(claimsAt(clk.Now(), sub), "email", "alice@example.test")
		c = with(c, "groups", []string{"payments-owners"})
		return with(c, "email_verified", verified)
	}
	alice, err := a.Authenticate(context.Background(), "Bearer "+sign(t, rsaK, claims("idp-user-1111", true)))
	if err != nil || !strings.HasSuffix(alice.ID, ":alice@example.test") {
		t.Fatalf("verified owner = %+v, %v; want admitted", alice, err)
	}
	other, err := a.Authenticate(context.Background(), "Bearer "+sign(t, rsaK, claims("idp-user-2222", false)))
	if !errors.Is(err, ownerauth.ErrUnauthenticated) || !strings.Contains(err.Error(), "email_verified") {
		t.Fatalf("unverified user = %+v, %v; want refused for email_verified", other, err)
	}
	if other.ID == alice.ID {
		t.Fatalf("the unverified user is owner %q, the verified user's", other.ID)
	}
}
