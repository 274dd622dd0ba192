package config

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/countersign/countersign/internal/audit"
)

// TestAuditVerifierKey: serve takes --audit-verifier-key (and its
// environment variable), which must read as a verifier key and, beside a
// signing key, be that key's own.
func TestAuditVerifierKey(t *testing.T) {
	key, pub, _, err := audit.WriteKeyPair(t.TempDir(), "cfg.test")
	if err != nil {
		t.Fatal(err)
	}
	otherDir := t.TempDir()
	if _, _, _, err := audit.WriteKeyPair(otherDir, "cfg.test"); err != nil { // same name, another key
		t.Fatal(err)
	}
	otherPub := filepath.Join(otherDir, "cfg.test.pub")
	cases := []struct {
		name              string
		signing, verifier string
		want              string // empty: valid
	}{
		{"verifier key only", "", pub, ""},
		{"the signing key's own verifier key", key, pub, ""},
		{"another key's verifier key beside the signing key", key, otherPub, "audit-verifier-key (COUNTERSIGN_AUDIT_VERIFIER_KEY) is key cfg.test+"},
		{"verifier key missing", "", "/nonexistent/audit.pub", "audit-verifier-key (COUNTERSIGN_AUDIT_VERIFIER_KEY): audit verifier key: open /nonexistent/audit.pub"},
		{"a signer key as the verifier key", "", key, "audit-verifier-key (COUNTERSIGN_AUDIT_VERIFIER_KEY): audit verifier key " + key},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			c.DatabaseURL = "postgres://u@127.0.0.1/db"
			c.AuditSigningKey, c.AuditVerifierKey = tc.signing, tc.verifier
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	// A serve flag, and its environment variable.
	c := Defaults()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.BindServe(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := Resolve(fs, env(map[string]string{"COUNTERSIGN_AUDIT_VERIFIER_KEY": pub})); err != nil || c.AuditVerifierKey != pub {
		t.Fatalf("COUNTERSIGN_AUDIT_VERIFIER_KEY gave %q, %v; want %q", c.AuditVerifierKey, err, pub)
	}
}
