package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// TestMain gives the package's tests a throwaway migrated Postgres. (It is
// the package's only TestMain; a test that needs no database ignores it.)
func TestMain(m *testing.M) {
	pgtest.Main(m, func(ctx context.Context, url string) error {
		_, err := ledger.Migrate(ctx, url, nil)
		return err
	})
}

type cliResult struct {
	out, errOut string
	err         error
}

// runCLI executes the countersign command line in process.
func runCLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewRoot(&out, &errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return cliResult{out.String(), errOut.String(), err}
}

func writeMandateFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mandateYAML is a valid mandate for agentID, valid from an hour ago.
func mandateYAML(agentID, purpose string, validFor time.Duration) string {
	from := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	return fmt.Sprintf(`rail: stripe
rail_account: acct_cli
agent_id: %s
purpose: %s
valid_from: %s
valid_until: %s
mode: budgeted
grants:
  - action_kind: refund
    max_amount_minor: 50000
    currencies: [USD]
windows:
  - scope: agent
    duration: 24h
    max_amount: {amount_minor: 200000, currency: USD}
`, agentID, purpose, from.Format(time.RFC3339), from.Add(validFor).Format(time.RFC3339))
}

func TestMandateLint(t *testing.T) {
	dir := t.TempDir()
	good := writeMandateFile(t, dir, "good.yaml", mandateYAML("agt_k3v9q2m1x7c4b8n6z5wd", "refunds", 24*time.Hour))
	bad := writeMandateFile(t, dir, "bad.yaml", strings.Replace(strings.Replace(
		mandateYAML("agt_k3v9q2m1x7c4b8n6z5wd", "refunds", 24*time.Hour),
		"max_amount_minor: 50000", "max_amount_minor: 500.00", 1),
		"amount_minor: 200000", `amount_minor: "200000"`, 1))
	cases := []struct {
		name    string
		files   []string
		wantErr string
		want    []string
	}{
		{"valid", []string{good}, "", []string{good + ": ok, mandate "}},
		{"float and string amounts", []string{bad}, "2 problems in 1 file", []string{
			bad + ":10:23: grants[0].max_amount_minor: 500.00 is not an integer",
			bad + `:15:32: windows[0].max_amount.amount_minor: must be an integer number of minor units (1250 for 12.50) written without quotes, got the string "200000"`,
		}},
		{"several files", []string{good, bad}, "2 problems in 1 file", []string{good + ": ok", bad + ":10:23:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, "", append([]string{"mandate", "lint"}, tc.files...)...)
			if tc.wantErr == "" && r.err != nil || tc.wantErr != "" && (r.err == nil || r.err.Error() != tc.wantErr) {
				t.Fatalf("err = %v, want %q\n%s", r.err, tc.wantErr, r.out)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.out, w) {
					t.Errorf("output lacks %q:\n%s", w, r.out)
				}
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		if r := runCLI(t, "", "mandate", "lint", filepath.Join(dir, "nope.yaml")); r.err == nil {
			t.Fatal("lint of a missing file succeeded")
		}
	})
	t.Run("hash matches the package", func(t *testing.T) {
		data, _ := os.ReadFile(good)
		m, err := mandate.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := mandate.Hash(m)
		if r := runCLI(t, "", "mandate", "lint", good); !strings.Contains(r.out, h) {
			t.Errorf("lint printed %q, want hash %s", r.out, h)
		}
	})
}

var hashLine = regexp.MustCompile(`^[0-9a-f]{64}\n$`)

// mandateAccount is the rail account of the mandate file.
func mandateAccount(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mandate.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return m.GetRailAccount()
}

func TestMandateApplyShowRevoke(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	store, err := ledger.Open(ctx, url, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	agent, err := store.CreateAgent(ctx, "own_cli", "refund bot")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := writeMandateFile(t, dir, "m.yaml", mandateYAML(agent.ID, "refunds", 30*24*time.Hour))
	db := "--database-url=" + url

	// Without the operator's grant of the account, nothing is applied.
	r := runCLI(t, "", "mandate", "apply", file, db)
	if r.err == nil || !strings.Contains(r.err.Error(), "countersign owner grant-account") {
		t.Fatalf("apply without a grant = %q, %v", r.out, r.err)
	}
	acct := mandateAccount(t, file)
	if r := runCLI(t, "", "owner", "grant-account", acct, "own_cli", db); r.err != nil || !strings.Contains(r.out, "granted") {
		t.Fatalf("grant-account = %q, %v", r.out, r.err)
	}
	if r := runCLI(t, "", "owner", "grant-account", acct, "own_cli", db); r.err != nil || !strings.Contains(r.out, "already holds") {
		t.Fatalf("second grant-account = %q, %v", r.out, r.err)
	}
	if r := runCLI(t, "", "owner", "accounts", db); r.err != nil || !strings.Contains(r.out, acct) || !strings.Contains(r.out, "own_cli") {
		t.Fatalf("accounts = %q, %v", r.out, r.err)
	}

	// apply prints the hash, then "already applied".
	r = runCLI(t, "", "mandate", "apply", file, db)
	if r.err != nil || !hashLine.MatchString(r.out) {
		t.Fatalf("apply = %q, %v (stderr %q)", r.out, r.err, r.errOut)
	}
	hash := strings.TrimSpace(r.out)
	rec, err := store.GetMandate(ctx, hash)
	if err != nil || rec.AgentID != agent.ID || rec.OwnerID != "own_cli" || rec.Mode != "budgeted" {
		t.Fatalf("stored mandate = %+v, %v", rec, err)
	}
	if got := mandate.HashCanonical(rec.Canonical); got != hash {
		t.Fatalf("stored canonical hashes to %s, not %s", got, hash)
	}
	r = runCLI(t, "", "mandate", "apply", file, db)
	if r.err != nil || !strings.HasPrefix(r.out, hash+" already applied at ") {
		t.Fatalf("second apply = %q, %v", r.out, r.err)
	}

	// show prints YAML that applies to the same hash.
	r = runCLI(t, "", "mandate", "show", hash, db)
	if r.err != nil {
		t.Fatalf("show: %v", r.err)
	}
	for _, w := range []string{"# mandate " + hash, "# state: active", "# owner: own_cli", "agent_id: " + agent.ID, "max_amount_minor: 50000",
		"# limits: refund ≤ 500.00 USD; 2,000.00 USD per 24h (the YAML below is in minor units)"} {
		if !strings.Contains(r.out, w) {
			t.Errorf("show lacks %q:\n%s", w, r.out)
		}
	}
	shown := writeMandateFile(t, dir, "shown.yaml", r.out)
	if r := runCLI(t, "", "mandate", "apply", shown, db); r.err != nil || !strings.HasPrefix(r.out, hash+" already applied") {
		t.Fatalf("apply of show's output = %q, %v; want the same mandate", r.out, r.err)
	}

	// A second mandate for the same agent and account: the owner is told.
	second := writeMandateFile(t, dir, "m2.yaml", mandateYAML(agent.ID, "refunds, second edition", 30*24*time.Hour))
	r = runCLI(t, "", "mandate", "apply", second, db)
	if r.err != nil || !hashLine.MatchString(r.out) || !strings.Contains(r.errOut, "note: mandate "+hash+" also covers agent") ||
		!strings.Contains(r.errOut, "windows count the agent's actions under both; its budgets start at zero") {
		t.Fatalf("apply of a second mandate = %q, %v, stderr %q", r.out, r.err, r.errOut)
	}
	secondHash := strings.TrimSpace(r.out)

	r = runCLI(t, "", "mandate", "show", "--agent", agent.ID, db)
	if r.err != nil || !strings.Contains(r.out, "HASH") || !strings.Contains(r.out, hash+"  active") || !strings.Contains(r.out, secondHash) ||
		!strings.Contains(r.out, "refund ≤ 500.00 USD; 2,000.00 USD per 24h") {
		t.Fatalf("show --agent = %q, %v", r.out, r.err)
	}
	if lines := strings.Count(r.out, "\n"); lines != 3 {
		t.Errorf("show --agent printed %d lines, want a header and 2 mandates:\n%s", lines, r.out)
	}

	// revoke needs a reason, then is one way.
	if r := runCLI(t, "", "mandate", "revoke", hash, db); r.err == nil || !strings.Contains(r.err.Error(), "--reason") {
		t.Fatalf("revoke without reason = %v", r.err)
	}
	if r := runCLI(t, "", "mandate", "revoke", hash, "--reason", "replaced by the second edition", db); r.err != nil || r.out != "revoked "+hash+"\n" {
		t.Fatalf("revoke = %q, %v", r.out, r.err)
	}
	if r := runCLI(t, "", "mandate", "revoke", hash, "--reason", "again", db); r.err != nil ||
		!strings.Contains(r.out, "already revoked") || !strings.Contains(r.out, "replaced by the second edition") {
		t.Fatalf("second revoke = %q, %v", r.out, r.err)
	}
	r = runCLI(t, "", "mandate", "show", hash, db)
	if r.err != nil || !strings.Contains(r.out, "# state: revoked") || !strings.Contains(r.out, "replaced by the second edition") {
		t.Fatalf("show after revoke = %q, %v", r.out, r.err)
	}
	// Applying the revoked policy again does not revive it.
	if r := runCLI(t, "", "mandate", "apply", file, db); r.err == nil || !strings.Contains(r.err.Error(), "stays revoked") {
		t.Fatalf("apply of a revoked mandate = %q, %v", r.out, r.err)
	}
	active, err := store.ActiveMandate(ctx, agent.ID, "acct_cli", time.Now())
	if err != nil || active.Hash != secondHash {
		t.Fatalf("ActiveMandate = %s, %v; want the second mandate", active.Hash, err)
	}

	refusals := []struct {
		name string
		args []string
		want string
	}{
		{"unknown agent", []string{"mandate", "apply", writeMandateFile(t, dir, "ghost.yaml", mandateYAML("agt_ghost0000", "x", time.Hour*24)), db}, "does not exist or is revoked"},
		{"expired", []string{"mandate", "apply", writeMandateFile(t, dir, "old.yaml", mandateYAML(agent.ID, "x", 30*time.Minute)), db}, "expired"},
		{"invalid", []string{"mandate", "apply", writeMandateFile(t, dir, "inv.yaml", "rail: visa\n"), db}, "1 problem; nothing applied"},
		{"no database", []string{"mandate", "apply", file}, "database-url"},
		{"show unknown", []string{"mandate", "show", strings.Repeat("a", 64), db}, "not found"},
		{"show bad hash", []string{"mandate", "show", "abc", db}, "not a mandate hash"},
		{"show both", []string{"mandate", "show", hash, "--agent", agent.ID, db}, "either"},
		{"show neither", []string{"mandate", "show", db}, "either"},
		{"revoke unknown", []string{"mandate", "revoke", strings.Repeat("b", 64), "--reason", "x", db}, "not found"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, "", tc.args...)
			if r.err == nil || !strings.Contains(r.err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", r.err, tc.want)
			}
		})
	}
	if r := runCLI(t, "", "mandate", "apply", filepath.Join(dir, "inv.yaml"), db); !strings.Contains(r.errOut, "inv.yaml:1:7: rail: must be one of") {
		t.Errorf("apply of an invalid file printed %q, want located problems", r.errOut)
	}
}

func TestMandateInit(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "draft.yaml")
	answers := strings.Join([]string{
		"refund, payout, bribe", // unknown action: asked again
		"refund, payout",
		"visa", // asked again
		"stripe",
		"us dollars", // asked again
		"usd",
		"12.50", // not minor units: asked again
		"1e3",   // asked again
		"5000",
		"4000", // below the per-action maximum: asked again
		"20000",
		"acct_1Nv0FGQ9RKHgCVdK",
		"bob", // not an agent id: asked again
		"agt_k3v9q2m1x7c4b8n6z5wd",
		"Refunds and supplier payouts",
		"", // payees are required for payouts: asked again
		"ba_1001, ba_1002",
		"ops@example.com",
		"sometimes", // asked again
		"budgeted",
		"", // default: 90 days
	}, "\n") + "\n"
	r := runCLI(t, answers, "mandate", "init", "--out", out)
	if r.err != nil {
		t.Fatalf("init: %v\n%s", r.err, r.out)
	}
	for _, w := range []string{
		`"bribe" is not one of refund, payout, transfer; try again.`,
		`"12.50" is not a whole number of minor units of USD (5000 = 50.00 USD); try again.`,
		`"1e3" is not a whole number`,
		"the daily cap must be at least the per-action maximum (5000 = 50.00 USD); try again.",
		`"bob" is not an agent id`,
		"an answer is required; try again.",
		`"sometimes" is neither approval_required nor budgeted`,
		"Wrote " + out,
	} {
		if !strings.Contains(r.out, w) {
			t.Errorf("the conversation lacks %q:\n%s", w, r.out)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if lint := runCLI(t, "", "mandate", "lint", out); lint.err != nil {
		t.Fatalf("lint of the draft: %v\n%s\n%s", lint.err, lint.out, data)
	}
	m, err := mandate.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	days := m.GetValidUntil().AsTime().Sub(m.GetValidFrom().AsTime()).Hours() / 24
	if len(m.GetGrants()) != 2 || m.GetGrants()[0].GetMaxAmountMinor() != 5000 || m.GetGrants()[1].GetCurrencies()[0] != "USD" ||
		m.GetWindows()[0].GetMaxAmount().GetAmountMinor() != 20000 || m.GetMode().String() != "MANDATE_MODE_BUDGETED" ||
		len(m.GetAllowedPayees()) != 2 || m.GetRailAccount() != "acct_1Nv0FGQ9RKHgCVdK" || days != 90 {
		t.Errorf("draft lost answers:\n%s", data)
	}
	if !strings.Contains(string(data), "# Approver: ops@example.com") {
		t.Errorf("draft does not name the approver:\n%s", data)
	}

	t.Run("refuses to overwrite", func(t *testing.T) {
		r := runCLI(t, answers, "mandate", "init", "--out", out)
		if r.err == nil || !strings.Contains(r.err.Error(), "--force") {
			t.Fatalf("init over an existing file = %v", r.err)
		}
		if after, _ := os.ReadFile(out); !bytes.Equal(after, data) {
			t.Fatal("the existing file changed")
		}
	})
	t.Run("overwrites with --force", func(t *testing.T) {
		refundsOnly := strings.Replace(strings.Replace(answers, "refund, payout\n", "refund\n", 1), "\nba_1001, ba_1002", "", 1)
		refundsOnly = strings.Replace(refundsOnly, "Refunds and supplier payouts\n\n", "Refunds and supplier payouts\n", 1)
		r := runCLI(t, refundsOnly, "mandate", "init", "--out", out, "--force")
		if r.err != nil {
			t.Fatalf("init --force: %v\n%s", r.err, r.out)
		}
		after, _ := os.ReadFile(out)
		if m, err := mandate.Parse(after); err != nil || len(m.GetGrants()) != 1 {
			t.Fatalf("overwritten draft = %v\n%s", err, after)
		}
	})
	t.Run("input ends early", func(t *testing.T) {
		partial := filepath.Join(dir, "partial.yaml")
		r := runCLI(t, "refund\nstripe\nUSD\n", "mandate", "init", "--out", partial)
		if r.err == nil || !strings.Contains(r.err.Error(), "input ended") {
			t.Fatalf("init with short input = %v", r.err)
		}
		if _, err := os.Stat(partial); !os.IsNotExist(err) {
			t.Fatal("init wrote a file without all the answers")
		}
	})
	t.Run("input ends at a question with a default", func(t *testing.T) {
		noLast := filepath.Join(dir, "nolast.yaml")
		// The answers without the last empty line: the validity question
		// shows a default of 90 days, which the ended input takes.
		r := runCLI(t, strings.TrimSuffix(answers, "\n\n")+"\n", "mandate", "init", "--out", noLast)
		if r.err != nil {
			t.Fatalf("init whose input ends at a defaulted question: %v\n%s", r.err, r.out)
		}
		if !strings.Contains(r.out, "(input ended: took the default)") {
			t.Errorf("init did not say it took the default:\n%s", r.out)
		}
		b, err := os.ReadFile(noLast)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mandate.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if days := m.GetValidUntil().AsTime().Sub(m.GetValidFrom().AsTime()).Hours() / 24; days != 90 {
			t.Errorf("validity = %v days, want the default 90", days)
		}
	})
	t.Run("needs --out", func(t *testing.T) {
		if r := runCLI(t, answers, "mandate", "init"); r.err == nil || !strings.Contains(r.err.Error(), "--out") {
			t.Fatalf("init without --out = %v", r.err)
		}
	})
	t.Run("has no --yes", func(t *testing.T) {
		if r := runCLI(t, answers, "mandate", "init", "--out", filepath.Join(dir, "y.yaml"), "--yes"); r.err == nil {
			t.Fatal("init accepted --yes")
		}
	})
}

// TestMandateInitExplainsMinorUnitsAsTheRailReadsThem: Stripe treats MGA as
// zero-decimal, so the per-action question must say that 5000 is 5,000 MGA
// (what Stripe moves), not ISO 4217's 50.00 MGA; the rail is asked before
// the amounts so the example can follow it.
func TestMandateInitExplainsMinorUnitsAsTheRailReadsThem(t *testing.T) {
	for _, tc := range []struct{ rail, want, not string }{
		{"stripe", "in minor units of MGA (5000 = 5,000 MGA)", "50.00 MGA"},
		{"razorpay", "in minor units of MGA (5000 = 50.00 MGA)", "5,000 MGA"},
	} {
		t.Run(tc.rail, func(t *testing.T) {
			// The input ends at the per-action question, after it is shown.
			r := runCLI(t, "refund\n"+tc.rail+"\nMGA\n", "mandate", "init", "--out", filepath.Join(t.TempDir(), "m.yaml"))
			if r.err == nil || !strings.Contains(r.err.Error(), "input ended") {
				t.Fatalf("init = %v", r.err)
			}
			if !strings.Contains(r.out, tc.want) || strings.Contains(r.out, tc.not) {
				t.Errorf("the per-action question lacks %q or says %q:\n%s", tc.want, tc.not, r.out)
			}
		})
	}
}
