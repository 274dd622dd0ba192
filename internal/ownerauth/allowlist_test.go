package ownerauth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/api"
	"github.com/countersign/countersign/internal/ownerauth"
)

// An issuer signs tokens for everyone in its realm: a valid signature makes
// nobody an owner unless the allowlist names the subject or one of its
// groups.
func TestOIDCAllowlist(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	body := jwks(t, rsaK)
	clk := newClock()
	now := clk.Now()
	tok := func(sub string, extra map[string]any) string {
		c := claimsAt(now, sub)
		for k, v := range extra {
			c[k] = v
		}
		return "Bearer " + sign(t, rsaK, c)
	}
	tests := []struct {
		name    string
		cfg     func(*ownerauth.Config)
		header  string
		wantSub string // "" = refused with ErrNotAllowed
	}{
		{name: "listed subject", cfg: subjects("alice"), header: tok("alice", nil), wantSub: "alice"},
		{name: "unlisted subject of the same issuer", cfg: subjects("alice"), header: tok("mallory", nil)},
		{name: "subject matching is exact (case)", cfg: subjects("alice"), header: tok("Alice", nil)},
		{name: "subject matching is exact (prefix)", cfg: subjects("alice"), header: tok("alice2", nil)},
		{name: "group in the default claim", cfg: groups("", "payments-owners"),
			header: tok("carol", map[string]any{"groups": []string{"staff", "payments-owners"}}), wantSub: "carol"},
		{name: "group as a single string", cfg: groups("", "payments-owners"),
			header: tok("carol", map[string]any{"groups": "payments-owners"}), wantSub: "carol"},
		{name: "group in a configured namespaced claim", cfg: groups("https://example.test/groups", "payments-owners"),
			header: tok("carol", map[string]any{"https://example.test/groups": []string{"payments-owners"}}), wantSub: "carol"},
		{name: "group in another claim than the configured one", cfg: groups("roles", "payments-owners"),
			header: tok("carol", map[string]any{"groups": []string{"payments-owners"}})},
		{name: "no listed group", cfg: groups("", "payments-owners"),
			header: tok("carol", map[string]any{"groups": []string{"staff"}})},
		{name: "no groups claim", cfg: groups("", "payments-owners"), header: tok("carol", nil)},
		{name: "groups claim of another shape", cfg: groups("", "payments-owners"),
			header: tok("carol", map[string]any{"groups": map[string]any{"payments-owners": true}})},
		{name: "groups claim with non-strings", cfg: groups("", "1"),
			header: tok("carol", map[string]any{"groups": []any{1, true}})},
		{name: "group name matching is exact", cfg: groups("", "payments-owners"),
			header: tok("carol", map[string]any{"groups": []string{"payments-owners-readonly"}})},
		{name: "subject or group: subject", cfg: both("alice", "payments-owners"), header: tok("alice", nil), wantSub: "alice"},
		{name: "subject or group: group", cfg: both("alice", "payments-owners"),
			header: tok("dave", map[string]any{"groups": []string{"payments-owners"}}), wantSub: "dave"},
		{name: "a listed subject named in groups is no group", cfg: groups("", "payments-owners"),
			header: tok("payments-owners", nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newOIDC(t, clk, "file", body, func(c *ownerauth.Config) { c.AllowedSubjects = nil; tc.cfg(c) })
			o, err := a.Authenticate(context.Background(), tc.header)
			if tc.wantSub != "" {
				if err != nil || o.Subject != tc.wantSub || !strings.HasSuffix(o.ID, ":"+tc.wantSub) {
					t.Fatalf("owner = %+v, %v; want subject %q admitted", o, err, tc.wantSub)
				}
				return
			}
			if !errors.Is(err, ownerauth.ErrNotAllowed) || o != (ownerauth.Owner{}) {
				t.Fatalf("owner = %+v, err = %v; want ErrNotAllowed and no owner", o, err)
			}
			if !strings.Contains(err.Error(), "owner-allowed-subjects") || !strings.Contains(err.Error(), "owner-allowed-groups") {
				t.Fatalf("the refusal must say what would admit the subject: %v", err)
			}
		})
	}
}

func subjects(s ...string) func(*ownerauth.Config) {
	return func(c *ownerauth.Config) { c.AllowedSubjects = s }
}

func groups(claim string, g ...string) func(*ownerauth.Config) {
	return func(c *ownerauth.Config) { c.GroupsClaim, c.AllowedGroups = claim, g }
}

func both(sub, group string) func(*ownerauth.Config) {
	return func(c *ownerauth.Config) { c.AllowedSubjects, c.AllowedGroups = []string{sub}, []string{group} }
}

// OIDC without an allowlist does not start: there is no "allow everyone the
// issuer signed".
func TestOIDCAllowlistIsRequired(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	good := writeJWKSFile(t, jwks(t, rsaK))
	base := ownerauth.Config{Issuer: testIssuer, Audience: testAudience, JWKSFile: good}
	tests := []struct {
		name   string
		mutate func(*ownerauth.Config)
		errHas string // "" = accepted
	}{
		{"no allowlist", func(*ownerauth.Config) {}, "OIDC owners need an allowlist: set owner-allowed-subjects and/or owner-allowed-groups"},
		{"subjects", func(c *ownerauth.Config) { c.AllowedSubjects = []string{"alice"} }, ""},
		{"groups", func(c *ownerauth.Config) { c.AllowedGroups = []string{"owners"} }, ""},
		{"groups claim alone admits nobody", func(c *ownerauth.Config) { c.GroupsClaim = "roles" }, "OIDC owners need an allowlist"},
		{"groups claim without groups", func(c *ownerauth.Config) { c.AllowedSubjects, c.GroupsClaim = []string{"alice"}, "roles" },
			"owner-groups-claim is set but owner-allowed-groups is empty"},
		{"an empty subject", func(c *ownerauth.Config) { c.AllowedSubjects = []string{""} }, "owner-allowed-subjects"},
		{"allowlist without OIDC", func(c *ownerauth.Config) { *c = ownerauth.Config{AllowedSubjects: []string{"alice"}} },
			"owner-allowed-subjects or owner-allowed-groups is set but OIDC is off"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(&cfg)
			_, err := ownerauth.New(cfg, &fakeTokens{})
			if tc.errHas == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.errHas)
			}
		})
	}
}

// Through the guard, a verified but unlisted subject is PermissionDenied
// (OWNER_NOT_ALLOWED) and counts as a failed authentication; a listed one
// reaches the handler.
func TestGuardRefusesUnlistedOIDCSubjects(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	clk := newClock()
	a := newOIDC(t, clk, "file", jwks(t, rsaK), func(c *ownerauth.Config) { c.AllowedSubjects = []string{"alice"} })
	h := serve(t, &ownerauth.Guard{Auth: a, ToStatus: api.ToStatus})
	req := &countersignv1.GetAgentRequest{AgentId: "agt_x"}
	if _, err := h.owner.GetAgent(withAuth("Bearer "+sign(t, rsaK, claimsAt(clk.Now(), "alice"))), req); err != nil {
		t.Fatalf("listed subject refused: %v", err)
	}
	_, err := h.owner.GetAgent(withAuth("Bearer "+sign(t, rsaK, claimsAt(clk.Now(), "mallory"))), req)
	if status.Code(err) != codes.PermissionDenied || reasonOf(err) != "OWNER_NOT_ALLOWED" {
		t.Fatalf("err = %v (reason %q), want PermissionDenied OWNER_NOT_ALLOWED", err, reasonOf(err))
	}
	if !strings.Contains(status.Convert(err).Message(), `"mallory"`) {
		t.Fatalf("the refusal should name the subject it refused: %v", err)
	}
}

// TestEmailSubjectNeedsAVerifiedEmail: with the email claim naming owners,
// a token whose email the issuer has not verified is refused, so a person
// who can set their own address cannot sign in as the owner it names.
func TestEmailSubjectNeedsAVerifiedEmail(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	clk := newClock()
	a := newOIDC(t, clk, "file", jwks(t, rsaK), func(c *ownerauth.Config) {
		c.SubjectClaim, c.AllowedSubjects = "email", []string{"owner@example.test"}
	})
	for _, tc := range []struct {
		name     string
		verified any // nil: the claim is absent
		admitted bool
	}{
		{"verified", true, true},
		{"unverified", false, false},
		{"absent", nil, false},
		{"the string true", "true", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claimsAt(clk.Now(), "someone")
			c["email"] = "owner@example.test"
			if tc.verified != nil {
				c["email_verified"] = tc.verified
			}
			o, err := a.Authenticate(context.Background(), "Bearer "+sign(t, rsaK, c))
			if tc.admitted {
				if err != nil || o.Subject != "owner@example.test" {
					t.Fatalf("owner = %+v, %v; want admitted", o, err)
				}
				return
			}
			if !errors.Is(err, ownerauth.ErrUnauthenticated) || !strings.Contains(err.Error(), "email_verified") {
				t.Fatalf("owner = %+v, %v; want refused for an unverified email", o, err)
			}
		})
	}
}
