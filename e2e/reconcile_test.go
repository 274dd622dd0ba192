package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
)

// TestMatchOnPageThreeIsFound: the rail's answer to an allowed refund is
// lost, then 250 other refunds land on the same payment, so the refund
// sits on page 3 of the newest-first listing. The reconciler pages to it
// and settles the intent APPLIED; absence on page 1 is not absence.
func TestMatchOnPageThreeIsFound(t *testing.T) {
	e := newRailEnv(t, envOptions{reconcileDelay: 6 * time.Second, routeTimeout: 1500 * time.Millisecond})
	e.payment("stripe", "pi_p3", 1_000_000_000, "usd")
	e.fault(map[string]any{"profile": "timeout_after_apply", "count": 1, "method": "POST", "path": "/v1/refunds"})
	if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_p3"}, "amount": {"777"}}); r.Status != 504 {
		t.Fatalf("agent saw %d %s, want the proxy's 504", r.Status, r.Body)
	}
	its := e.intentsOn("pi_p3")
	if len(its) != 1 || its[0].State != intent.Unknown {
		t.Fatalf("after the lost answer: %+v", its)
	}
	// 250 newer refunds, straight at the rail.
	for i := range 250 {
		req, _ := http.NewRequest(http.MethodPost, e.mock+"/v1/refunds",
			strings.NewReader(url.Values{"payment_intent": {"pi_p3"}, "amount": {fmt.Sprint(1000 + i)}}.Encode()))
		req.Header.Set("Authorization", "Bearer "+stripeKey)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("filler refund %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
	its = e.settle("pi_p3", 30*time.Second)
	j := e.journal()
	var entity string
	for _, f := range j.Effects {
		if f.Amount == 777 {
			entity = f.EntityID
		}
	}
	if its[0].State != intent.Applied || its[0].RailEntityID != entity || entity == "" {
		t.Fatalf("intent %s/%s, journal entity %q", its[0].State, its[0].RailEntityID, entity)
	}
	fs, err := e.store.FindingsFor(context.Background(), its[0].Key)
	if err != nil || len(fs) == 0 {
		t.Fatalf("findings: %v %v", fs, err)
	}
	last := fs[len(fs)-1]
	if last.Outcome != ledger.FindingApplied || last.Pages < 3 {
		t.Fatalf("finding %+v: want found_applied on page 3 or later", last)
	}
}

// TestAuditVerifyNamesAHandEditedRecord runs the real binary against a
// ledger whose audit log was edited by hand.
func TestAuditVerifyNamesAHandEditedRecord(t *testing.T) {
	e := newRailEnv(t, envOptions{})
	e.payment("stripe", "pi_audit", 10000, "usd")
	if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_audit"}, "amount": {"100"}}); r.Status != 200 {
		t.Fatalf("refund: %d %s", r.Status, r.Body)
	}
	e.settle("pi_audit", 10*time.Second)
	verify := func(args ...string) (string, error) {
		out, err := exec.Command(filepath.Join(bin, "countersign"), append([]string{"audit", "verify", "--database-url", e.dbURL}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := verify(); err != nil || !strings.Contains(out, "0 broken") {
		t.Fatalf("clean ledger: %v\n%s", err, out)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var chain string
	var seq int64
	if err := conn.QueryRow(ctx, `SELECT chain, seq FROM audit_records WHERE to_state = 'APPLIED'`).Scan(&chain, &seq); err != nil {
		t.Fatal(err)
	}
	// A superuser edits by hand, around the append-only trigger.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE audit_records SET detail = 'refund voided' WHERE chain = $1 AND seq = $2`, chain, seq); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := verify()
	if err == nil {
		t.Fatalf("verify passed an edited log:\n%s", out)
	}
	want := regexp.MustCompile(fmt.Sprintf(`BROKEN chain %s record %d: `, regexp.QuoteMeta(chain), seq))
	if !want.MatchString(out) {
		t.Fatalf("verify output does not name chain %s record %d:\n%s", chain, seq, out)
	}
	// --rail-account reads one account's chains only.
	if out, err := verify("--rail-account", stripeAccount); err == nil || !want.MatchString(out) {
		t.Fatalf("verify --rail-account %s: %v\n%s", stripeAccount, err, out)
	}
	if out, err := verify("--rail-account", "acct_elsewhere"); err != nil || !strings.Contains(out, "0 chains, 0 records, 0 broken") {
		t.Fatalf("verify --rail-account acct_elsewhere: %v\n%s", err, out)
	}
}

// TestReconcileCommandSettlesOnePass: with serve's reconciler off, an
// ambiguous refund stays UNKNOWN until an operator runs `countersign
// reconcile`, which settles it in one pass.
func TestReconcileCommandSettlesOnePass(t *testing.T) {
	e := newRailEnv(t, envOptions{noReconciler: true, reconcileDelay: 100 * time.Millisecond})
	e.payment("stripe", "pi_cli", 10000, "usd")
	e.fault(map[string]any{"profile": "5xx_after_apply", "count": 1, "method": "POST", "path": "/v1/refunds"})
	if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_cli"}, "amount": {"900"}}); r.Status != 500 {
		t.Fatalf("agent saw %d %s, want the rail's 500", r.Status, r.Body)
	}
	if its := e.intentsOn("pi_cli"); len(its) != 1 || its[0].State != intent.Unknown {
		t.Fatalf("before the pass: %+v", its)
	}
	time.Sleep(200 * time.Millisecond) // the reconcile delay is a minimum wait by design
	out, err := exec.Command(filepath.Join(bin, "countersign"), "reconcile", "--database-url", e.dbURL,
		"--rails-file", e.railsFile, "--reconcile-delay", "100ms").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1 applied") {
		t.Fatalf("reconcile: %v\n%s", err, out)
	}
	its := e.intentsOn("pi_cli")
	if its[0].State != intent.Applied || its[0].RailEntityID != e.journal().Effects[0].EntityID {
		t.Fatalf("after the pass: %+v", its[0])
	}
}
