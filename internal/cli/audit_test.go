package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/api"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/ledgertest"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

func TestAuditKeygen(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, "", "audit", "keygen", "--name", "audit.example", "--out-dir", dir)
	if r.err != nil {
		t.Fatalf("keygen: %v\n%s", r.err, r.errOut)
	}
	for file, mode := range map[string]os.FileMode{"audit.example.key": 0o600, "audit.example.pub": 0o644} {
		fi, err := os.Stat(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&^mode != 0 || (file == "audit.example.key" && fi.Mode().Perm() != 0o600) {
			t.Errorf("%s has mode %v, want %v", file, fi.Mode().Perm(), mode)
		}
	}
	key, _ := os.ReadFile(filepath.Join(dir, "audit.example.key"))
	pub, _ := os.ReadFile(filepath.Join(dir, "audit.example.pub"))
	if !strings.HasPrefix(string(key), "PRIVATE+KEY+audit.example+") || !strings.HasPrefix(string(pub), "audit.example+") ||
		!strings.Contains(r.out, strings.TrimSpace(string(pub))) || strings.Contains(r.out, strings.TrimSpace(string(key))) {
		t.Fatalf("keys %q / %q, output %q", key, pub, r.out)
	}
	if r := runCLI(t, "", "audit", "keygen", "--name", "audit.example", "--out-dir", dir); r.err == nil || !strings.Contains(r.err.Error(), "exists") {
		t.Fatalf("keygen over existing files: %v", r.err)
	}
	if r := runCLI(t, "", "audit", "keygen", "--name", "a+b", "--out-dir", dir); r.err == nil {
		t.Fatal("keygen accepted a name with '+'")
	}
}

// auditLedger is a migrated ledger with two of own_a's intents on
// acct_cli_audit (2 records: each is born IN_FLIGHT, one record), an audit key pair, and another key's verifier.
func auditLedger(t *testing.T) (url string, store *ledger.Store, key, pub, otherPub string) {
	t.Helper()
	ctx := context.Background()
	url = pgtest.NewDatabase(t)
	store, err := ledger.Open(ctx, url, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	a, err := store.CreateAgent(ctx, "own_a", "bot")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.GrantRailAccount(ctx, "acct_cli_audit", "own_a"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		ni := keyedRefund(t, i, a.ID)
		if err := ledgertest.InFlight(ctx, store, ni, ni.SIK); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if r := runCLI(t, "", "audit", "keygen", "--name", "cli.audit", "--out-dir", dir); r.err != nil {
		t.Fatal(r.err)
	}
	other := t.TempDir()
	// Another key of the same name: only the key hash tells them apart.
	if r := runCLI(t, "", "audit", "keygen", "--name", "cli.audit", "--out-dir", other); r.err != nil {
		t.Fatal(r.err)
	}
	return url, store, filepath.Join(dir, "cli.audit.key"), filepath.Join(dir, "cli.audit.pub"), filepath.Join(other, "cli.audit.pub")
}

// keyedRefund is a refund of 100 USD on pi_1 on acct_cli_audit, keyed as
// the engine keys it (its SIK that of its canonical action), made
// distinct by n.
func keyedRefund(t *testing.T, n int, agentID string) ledger.NewIntent {
	t.Helper()
	a := sik.Action{V: sik.Version, RailAccount: "acct_cli_audit", Action: "refund", Subject: "pi_1", AmountMinor: 100, Currency: "USD",
		Distinct: fmt.Sprintf("refund %d", n)}
	canon, k, err := a.Keyed()
	if err != nil {
		t.Fatal(err)
	}
	return ledger.NewIntent{Key: ledger.Key{RailAccount: a.RailAccount, SIK: string(k)}, Rail: "stripe", Action: a.Action, Subject: a.Subject,
		AmountMinor: a.AmountMinor, Currency: a.Currency, DistinctReason: a.Distinct, Canonical: string(canon), AgentID: agentID}
}

func TestAuditSealAndVerify(t *testing.T) {
	url, _, key, pub, otherPub := auditLedger(t)
	// No sequencer has signed a heartbeat: the unsealed records are stale
	// however fresh their own times, unless no bound is asked.
	if r := runCLI(t, "", "audit", "verify", "--database-url", url, "--audit-verifier-key", pub); !errorsIs(r.err, errAuditBroken) ||
		!strings.Contains(r.out, "PROBLEM acct_cli_audit stale-unsealed: 2 records unsealed for longer than 1m0s") ||
		!strings.Contains(r.out, "no valid sequencer heartbeat at all") {
		t.Fatalf("verify before any sealing pass: %v\n%s", r.err, r.out)
	}
	if r := runCLI(t, "", "audit", "verify", "--database-url", url, "--audit-verifier-key", pub, "--max-unsealed-age", "0"); r.err != nil ||
		!strings.Contains(r.out, "1 rail accounts, 0 sealed records, 2 unsealed, 0 checkpoints, 0 problems") {
		t.Fatalf("verify before sealing: %v\n%s", r.err, r.out)
	}
	if r := runCLI(t, "", "audit", "seal", "--database-url", url, "--audit-signing-key", key); r.err != nil ||
		!strings.Contains(r.out, "sealed 2 records of 1 rail accounts") {
		t.Fatalf("seal: %v\n%s", r.err, r.out)
	}
	r := runCLI(t, "", "audit", "verify", "--database-url", url, "--audit-verifier-key", pub)
	if r.err != nil || !strings.Contains(r.out, "1 rail accounts, 2 sealed records, 0 unsealed, 1 checkpoints, 0 problems") {
		t.Fatalf("verify after sealing: %v\n%s", r.err, r.out)
	}
	// Without the verifier key it refuses, unless told to go on without
	// one, and then says signatures went unchecked; with another key,
	// every checkpoint is refused.
	if r := runCLI(t, "", "audit", "verify", "--database-url", url); r.err == nil || !strings.Contains(r.err.Error(), "audit verify needs --audit-verifier-key") ||
		strings.Contains(r.out, "rail accounts") {
		t.Fatalf("verify without a key: %v\n%s", r.err, r.out)
	}
	if r := runCLI(t, "", "audit", "verify", "--database-url", url, "--insecure-no-signatures"); r.err != nil ||
		!strings.Contains(r.out, "signatures NOT checked (--insecure-no-signatures)") || !strings.Contains(r.out, "1 checkpoints, 0 problems") {
		t.Fatalf("verify without a key, --insecure-no-signatures: %v\n%s", r.err, r.out)
	}
	if r := runCLI(t, "", "audit", "verify", "--database-url", url, "--insecure-no-signatures", "--audit-verifier-key", pub); r.err == nil ||
		!strings.Contains(r.err.Error(), "give one or the other") {
		t.Fatalf("verify with a key and --insecure-no-signatures: %v\n%s", r.err, r.out)
	}
	if r := runCLI(t, "", "audit", "verify", "--database-url", url, "--audit-verifier-key", otherPub); !errorsIs(r.err, errAuditBroken) ||
		!strings.Contains(r.out, "PROBLEM acct_cli_audit untrusted-signer: checkpoint of size 2") {
		t.Fatalf("verify with another key: %v\n%s", r.err, r.out)
	}
	// A sealed record edited by hand is named.
	editAudit(t, url, `UPDATE audit_records SET detail = 'refund voided' WHERE leaf_index = 1`)
	r = runCLI(t, "", "audit", "verify", "--database-url", url, "--audit-verifier-key", pub)
	if !errorsIs(r.err, errAuditBroken) || !regexp.MustCompile(`PROBLEM acct_cli_audit altered: record \d+ \(leaf 1\)`).MatchString(r.out) {
		t.Fatalf("verify after an edit: %v\n%s", r.err, r.out)
	}
	if r := runCLI(t, "", "audit", "verify", "--database-url", url, "--rail-account", "acct_elsewhere", "--audit-verifier-key", pub); r.err != nil ||
		!strings.Contains(r.out, "0 rail accounts") {
		t.Fatalf("verify another account: %v\n%s", r.err, r.out)
	}
}

func errorsIs(err, target error) bool { return err != nil && err.Error() == target.Error() }

func editAudit(t *testing.T, url, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// startOwnerAPI serves the real owner API over store; the token "tok_a"
// is own_a, "tok_b" own_b.
func startOwnerAPI(t *testing.T, store *ledger.Store) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	countersignv1.RegisterOwnerServiceServer(srv, api.NewOwnerServer(store, func(ctx context.Context) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		return map[string]string{"Bearer tok_a": "own_a", "Bearer tok_b": "own_b"}[strings.Join(md.Get("authorization"), "")], nil
	}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func TestAuditProofCommands(t *testing.T) {
	url, store, key, pub, otherPub := auditLedger(t)
	addr := startOwnerAPI(t, store)
	ctx := context.Background()
	if r := runCLI(t, "", "audit", "seal", "--database-url", url, "--audit-signing-key", key); r.err != nil {
		t.Fatal(r.err)
	}
	recs, err := store.OwnerAuditRecords(ctx, "own_a", ledger.AuditFilter{}, 0, 100)
	if err != nil || len(recs) != 2 {
		t.Fatalf("records %v, %v", recs, err)
	}
	owner := []string{"--server", addr, "--owner-token", "tok_a"}
	inclusion := func(id int64, args ...string) cliResult {
		return runCLI(t, "", append(append([]string{"audit", "inclusion", strconv.FormatInt(id, 10)}, owner...), args...)...)
	}
	for _, rec := range recs {
		r := inclusion(rec.ID, "--audit-verifier-key", pub)
		if r.err != nil || !strings.HasPrefix(r.out, fmt.Sprintf("ok: record %d (intent %s", rec.ID, rec.SIK)) ||
			!strings.Contains(r.out, fmt.Sprintf("is leaf %d of countersign/audit/acct_cli_audit at tree size 2", *rec.LeafIndex)) {
			t.Fatalf("inclusion of %d: %v\n%s%s", rec.ID, r.err, r.out, r.errOut)
		}
	}
	// Another key: the checkpoint is not believed.
	if r := inclusion(recs[0].ID, "--audit-verifier-key", otherPub); !errorsIs(r.err, errProofFailed) || !strings.HasPrefix(r.out, "FAIL: checkpoint: not signed by the trusted key") {
		t.Fatalf("inclusion with another key: %v\n%s", r.err, r.out)
	}
	// Seal more, then prove the log only grew.
	third := keyedRefund(t, 2, "")
	if err := ledgertest.InFlight(ctx, store, third, third.SIK); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "", "audit", "seal", "--database-url", url, "--audit-signing-key", key); r.err != nil {
		t.Fatal(r.err)
	}
	consistency := append([]string{"audit", "consistency", "--rail-account", "acct_cli_audit", "--from", "2"}, owner...)
	if r := runCLI(t, "", append(consistency, "--audit-verifier-key", pub)...); r.err != nil ||
		!strings.Contains(r.out, "ok: the log of acct_cli_audit at tree size 3 extends it at tree size 2") {
		t.Fatalf("consistency: %v\n%s%s", r.err, r.out, r.errOut)
	}
	if r := runCLI(t, "", append(consistency, "--audit-verifier-key", otherPub)...); !errorsIs(r.err, errProofFailed) || !strings.HasPrefix(r.out, "FAIL: older checkpoint") {
		t.Fatalf("consistency with another key: %v\n%s", r.err, r.out)
	}
	// A record altered after sealing no longer proves: the server hands
	// out its fields as they are now, and they are not the sealed leaf.
	editAudit(t, url, fmt.Sprintf(`UPDATE audit_records SET detail = 'refund voided' WHERE id = %d`, recs[1].ID))
	if r := inclusion(recs[1].ID, "--audit-verifier-key", pub); !errorsIs(r.err, errProofFailed) || !strings.Contains(r.out, "FAIL: record") {
		t.Fatalf("inclusion of an altered record: %v\n%s", r.err, r.out)
	}
	// Another owner is not told the record exists.
	if r := runCLI(t, "", "audit", "inclusion", strconv.FormatInt(recs[0].ID, 10), "--server", addr, "--owner-token", "tok_b",
		"--audit-verifier-key", pub); r.err == nil || !strings.Contains(r.err.Error(), "NotFound") {
		t.Fatalf("own_b asks for own_a's record: %v\n%s", r.err, r.out)
	}
}
