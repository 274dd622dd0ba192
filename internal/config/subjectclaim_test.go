package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestOwnerSubjectClaimIsSubOrEmail: a profile claim as the owner subject
// claim stops start-up, with an error naming the flag and the claim.
func TestOwnerSubjectClaimIsSubOrEmail(t *testing.T) {
	jwksFile := filepath.Join(t.TempDir(), "jwks.json")
	for _, tc := range []struct {
		claim string
		ok    bool
	}{{"sub", true}, {"email", true}, {"preferred_username", false}, {"name", false}, {"nickname", false}} {
		t.Run(tc.claim, func(t *testing.T) {
			c := Defaults()
			c.DatabaseURL = "postgres://x/db"
			c.OwnerIssuer, c.OwnerAudience, c.OwnerJWKSFile = "https://id.example.test", "countersign", jwksFile
			c.OwnerAllowedSubjects, c.OwnerSubjectClaim = "alice", tc.claim
			err := c.Validate()
			if tc.ok {
				if err != nil {
					t.Fatalf("Validate() = %v; want accepted", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), `owner-subject-claim "`+tc.claim+`" is refused`) {
				t.Fatalf("Validate() = %v; want owner-subject-claim %q refused", err, tc.claim)
			}
		})
	}
}
