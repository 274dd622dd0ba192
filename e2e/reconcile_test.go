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
	"github.com/countersign/countersign/internal/testing/wait"
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
// ledger whose audit log serve sealed and whose sealed record was then
// edited by hand.
func TestAuditVerifyNamesAHandEditedRecord(t *testing.T) {
	e := newRailEnv(t, envOptions{})
	e.payment("stripe", "pi_audit", 10000, "usd")
	if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_audit"}, "amount": {"100"}}); r.Status != 200 {
		t.Fatalf("refund: %d %s", r.Status, r.Body)
	}
	e.settle("pi_audit", 10*time.Second)
	verify := func(args ...string) (string, error) {
		out, err := exec.Command(filepath.Join(bin, "countersign"), append([]string{"audit", "verify", "--database-url", e.dbURL,
			"--audit-verifier-key", e.auditPub}, args...)...).CombinedOutput()
		return string(out), err
	}
	// serve's sequencer seals every record within a few intervals.
	var out string
	var err error
	if !wait.Until(20*time.Second, func() bool {
		out, err = verify()
		return err == nil && strings.Contains(out, " 0 unsealed,") && !strings.Contains(out, " 0 sealed records")
	}) {
		t.Fatalf("serve did not seal the log: %v\n%s", err, out)
	}
	if !strings.Contains(out, "0 problems") {
		t.Fatalf("clean ledger: %v\n%s", err, out)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var id, leaf int64
	if err := conn.QueryRow(ctx, `SELECT id, leaf_index FROM audit_records WHERE to_state = 'APPLIED'`).Scan(&id, &leaf); err != nil {
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
	if _, err := tx.Exec(ctx, `UPDATE audit_records SET detail = 'refund voided' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	out, err = verify()
	if err == nil {
		t.Fatalf("verify passed an edited log:\n%s", out)
	}
	want := regexp.MustCompile(fmt.Sprintf(`PROBLEM %s altered: record %d \(leaf %d\)`, regexp.QuoteMeta(stripeAccount), id, leaf))
	if !want.MatchString(out) {
		t.Fatalf("verify output does not name record %d (leaf %d):\n%s", id, leaf, out)
	}
	// --rail-account reads one account's log only.
	if out, err := verify("--rail-account", stripeAccount); err == nil || !want.MatchString(out) {
		t.Fatalf("verify --rail-account %s: %v\n%s", stripeAccount, err, out)
	}
	if out, err := verify("--rail-account", "acct_elsewhere"); err != nil || !strings.Contains(out, "0 rail accounts, 0 sealed records, 0 unsealed, 0 checkpoints, 0 problems") {
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
	// The intent is due once the reconcile delay and the rail's settle time
	// (the route's timeout here) have passed since the request left: until
	// then a pass reconciles nothing.
	var out []byte
	if !wait.Until(30*time.Second, func() bool {
		var err error
		out, err = exec.Command(filepath.Join(bin, "countersign"), "reconcile", "--database-url", e.dbURL,
			"--rails-file", e.railsFile, "--reconcile-delay", "100ms").CombinedOutput()
		if err != nil {
			t.Fatalf("reconcile: %v\n%s", err, out)
		}
		return strings.Contains(string(out), "1 applied")
	}) {
		t.Fatalf("reconcile never settled the refund:\n%s", out)
	}
	its := e.intentsOn("pi_cli")
	if its[0].State != intent.Applied || its[0].RailEntityID != e.journal().Effects[0].EntityID {
		t.Fatalf("after the pass: %+v", its[0])
	}
}
