package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/testing/ledgertest"
)

// TestAuditVerifyTakesNoForgedHeartbeat: a database writer seals the log
// with a key of their own under the real key's name, which also signs a
// fresh heartbeat, and leaves new records unsealed. With the real key,
// verify names the forged checkpoint and takes no forged heartbeat; with
// --insecure-no-signatures no heartbeat counts, so the unsealed records are
// stale and it exits 1. Found by a review: without a key, verify exited 0,
// the forged heartbeat vouching for the unsealed records.
func TestAuditVerifyTakesNoForgedHeartbeat(t *testing.T) {
	url, store, _, pub, otherPub := auditLedger(t)
	forgerKey := strings.TrimSuffix(otherPub, ".pub") + ".key"
	if r := runCLI(t, "", "audit", "seal", "--database-url", url, "--audit-signing-key", forgerKey); r.err != nil {
		t.Fatalf("the forger's seal: %v\n%s", r.err, r.out)
	}
	// A new record, unsealed, which the forger's fresh heartbeat is newer than.
	a, err := store.CreateAgent(context.Background(), "own_a", "bot 2")
	if err != nil {
		t.Fatal(err)
	}
	ni := keyedRefund(t, 9, a.ID)
	if err := ledgertest.InFlight(context.Background(), store, ni, ni.SIK); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"the real key", []string{"--audit-verifier-key", pub}, []string{
			"PROBLEM acct_cli_audit untrusted-signer: checkpoint of size 2",
			"PROBLEM acct_cli_audit stale-unsealed: 1 records unsealed for longer than 1m0s",
			"sequencer heartbeats ignored"}},
		{"no key", []string{"--insecure-no-signatures"}, []string{
			"PROBLEM acct_cli_audit stale-unsealed: 1 records unsealed for longer than 1m0s, as far as this verification can tell",
			"no trusted verifier key was given",
			"signatures NOT checked"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, "", append([]string{"audit", "verify", "--database-url", url}, tc.args...)...)
			if !errorsIs(r.err, errAuditBroken) {
				t.Fatalf("verify passed a forged log and heartbeat: %v\n%s", r.err, r.out)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.out, w) {
					t.Errorf("verify does not say %q:\n%s", w, r.out)
				}
			}
		})
	}
}
