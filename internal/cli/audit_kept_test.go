package cli

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/ledgertest"
)

// TestAuditKeptCheckpointsCatchAReSealedRewrite: an owner keeps the
// checkpoints it verified (--save-checkpoint). Whoever can write the
// ledger removes the log, edits a sealed record and lets a (restarted)
// sequencer seal it all again with the real key: verify and the
// server-to-server consistency proof pass, the kept checkpoints do not.
func TestAuditKeptCheckpointsCatchAReSealedRewrite(t *testing.T) {
	url, store, key, pub, _ := auditLedger(t)
	addr := startOwnerAPI(t, store)
	ctx := context.Background()
	owner := []string{"--server", addr, "--owner-token", "tok_a"}
	seal := func() {
		t.Helper()
		if r := runCLI(t, "", "audit", "seal", "--database-url", url, "--audit-signing-key", key); r.err != nil {
			t.Fatalf("seal: %v\n%s", r.err, r.errOut)
		}
	}
	seal()
	kept := filepath.Join(t.TempDir(), "kept.notes")
	recs, err := store.OwnerAuditRecords(ctx, "own_a", ledger.AuditFilter{}, 0, 100)
	if err != nil || len(recs) != 2 {
		t.Fatalf("records %v, %v", recs, err)
	}
	if r := runCLI(t, "", append([]string{"audit", "inclusion", strconv.FormatInt(recs[0].ID, 10), "--audit-verifier-key", pub,
		"--save-checkpoint", kept}, owner...)...); r.err != nil {
		t.Fatalf("inclusion: %v\n%s%s", r.err, r.out, r.errOut)
	}
	third := keyedRefund(t, 2, "")
	if err := ledgertest.InFlight(ctx, store, third, third.SIK); err != nil {
		t.Fatal(err)
	}
	seal()
	consistency := append([]string{"audit", "consistency", "--rail-account", "acct_cli_audit", "--audit-verifier-key", pub}, owner...)
	if r := runCLI(t, "", append(consistency, "--from-checkpoint", kept, "--save-checkpoint", kept)...); r.err != nil ||
		r.out != "ok: the log of acct_cli_audit at tree size 3 extends the kept checkpoint of tree size 2, signed by a trusted key\n" {
		t.Fatalf("consistency from the kept checkpoint: %v\n%s%s", r.err, r.out, r.errOut)
	}
	raw, err := os.ReadFile(kept)
	if err != nil {
		t.Fatal(err)
	}
	if cs, err := audit.OpenCheckpoints(string(raw), mustVerifier(t, pub)); err != nil || len(cs) != 2 || cs[0].Size != 2 || cs[1].Size != 3 {
		t.Fatalf("kept file holds %+v, %v; want the checkpoints of size 2 and 3", cs, err)
	}
	verify := []string{"audit", "verify", "--database-url", url, "--audit-verifier-key", pub}
	if r := runCLI(t, "", append(verify, "--trusted-checkpoint", kept)...); r.err != nil ||
		!strings.Contains(r.out, "2 of 2 kept checkpoints checked against their logs\n1 rail accounts, 3 sealed records, 0 unsealed, 2 checkpoints, 0 problems") {
		t.Fatalf("verify with kept checkpoints: %v\n%s%s", r.err, r.out, r.errOut)
	}

	// The rewrite: the log removed, the first record edited, every record
	// unsealed; a sequencer started afresh seals it again.
	for _, sql := range []string{
		`DELETE FROM audit_checkpoints`, `DELETE FROM audit_hashes`, `DELETE FROM audit_logs`,
		`UPDATE audit_records SET leaf_index = NULL`,
		`UPDATE audit_records SET detail = 'approved by the owner by phone' WHERE id = (SELECT min(id) FROM audit_records)`,
	} {
		editAudit(t, url, sql)
	}
	seal()
	if r := runCLI(t, "", verify...); r.err != nil || !strings.Contains(r.out, "0 problems") || !strings.Contains(r.out, "no kept checkpoint given") {
		t.Fatalf("verify without kept checkpoints (the rewrite is meant to pass it): %v\n%s", r.err, r.out)
	}
	if r := runCLI(t, "", append(consistency, "--from", "3")...); r.err != nil {
		t.Fatalf("consistency between the server's own checkpoints (the rewrite is meant to pass it): %v\n%s", r.err, r.out)
	}
	r := runCLI(t, "", append(verify, "--trusted-checkpoint", kept)...)
	if !errorsIs(r.err, errAuditBroken) || strings.Count(r.out, "PROBLEM acct_cli_audit forked: the kept checkpoint of size ") != 2 {
		t.Fatalf("verify with kept checkpoints after the rewrite: %v\n%s", r.err, r.out)
	}
	// The server sealed the rewrite in one batch: it has no checkpoint of
	// size 2, and its checkpoint of size 3 is another tree.
	r = runCLI(t, "", append(consistency, "--from-checkpoint", kept)...)
	if !errorsIs(r.err, errProofFailed) || !strings.HasPrefix(r.out, "FAIL: the server proves nothing from the kept checkpoint of size 2") {
		t.Fatalf("consistency from the kept checkpoints after the rewrite: %v\n%s", r.err, r.out)
	}
	kept3 := filepath.Join(t.TempDir(), "kept3.note")
	if err := os.WriteFile(kept3, []byte(audit.SplitNotes(string(raw))[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "", append(consistency, "--from-checkpoint", kept3)...)
	if !errorsIs(r.err, errProofFailed) || !strings.HasPrefix(r.out, "FAIL: the server's checkpoint of size 3 has root ") || !strings.Contains(r.out, "the log forked") {
		t.Fatalf("consistency from the kept checkpoint of size 3 after the rewrite: %v\n%s", r.err, r.out)
	}
	// Kept checkpoints are only worth their signature.
	if r := runCLI(t, "", "audit", "verify", "--database-url", url, "--trusted-checkpoint", kept); r.err == nil || !strings.Contains(r.err.Error(), "name the trusted verifier keys") {
		t.Fatalf("verify with kept checkpoints and no key: %v", r.err)
	}
	if r := runCLI(t, "", append(consistency, "--from", "2", "--from-checkpoint", kept)...); r.err == nil || !strings.Contains(r.err.Error(), "--from SIZE") {
		t.Fatalf("consistency with --from and --from-checkpoint: %v", r.err)
	}
}

// TestAuditVerifyChecksIntentsAgainstTheirAction: an intent's amount
// edited after it was sealed is named by verify.
func TestAuditVerifyChecksIntentsAgainstTheirAction(t *testing.T) {
	url, _, key, pub, _ := auditLedger(t)
	if r := runCLI(t, "", "audit", "seal", "--database-url", url, "--audit-signing-key", key); r.err != nil {
		t.Fatal(r.err)
	}
	victim := keyedRefund(t, 1, "").SIK
	editAudit(t, url, `UPDATE intents SET amount_minor = 99999999, payee = 'ba_attacker' WHERE sik = '`+victim+`'`)
	r := runCLI(t, "", "audit", "verify", "--database-url", url, "--audit-verifier-key", pub)
	if !errorsIs(r.err, errAuditBroken) ||
		!strings.Contains(r.out, "PROBLEM acct_cli_audit action-mismatch: intent "+victim+": its amount is 99999999, its canonical action's 100") ||
		!strings.Contains(r.out, `PROBLEM acct_cli_audit action-mismatch: intent `+victim+`: its payee is "ba_attacker", its canonical action's ""`) {
		t.Fatalf("verify after the intent was edited: %v\n%s", r.err, r.out)
	}
}

func mustVerifier(t *testing.T, file string) note.Verifier {
	t.Helper()
	v, err := audit.LoadVerifier(file)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
