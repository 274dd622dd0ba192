package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestServeMigrateCheck runs the real binary the way an operator would:
// migrate, then serve configured through COUNTERSIGN_* variables; Envoy's
// Check is denied with a JSON reason; SIGTERM shuts it down cleanly.
func TestServeMigrateCheck(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.NewCluster(t)
	if err := cluster.CreateDatabase(ctx, "countersign", ""); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr, envoyAddr := freeAddr(t), freeAddr(t), envoySocket(t)
	env := []string{
		"COUNTERSIGN_DATABASE_URL=" + cluster.URL("countersign"),
		"COUNTERSIGN_GRPC_ADDR=" + grpcAddr,
		"COUNTERSIGN_HTTP_ADDR=" + httpAddr,
		"COUNTERSIGN_ENVOY_ADDR=" + envoyAddr,
	}

	// Before migrating, serve runs but is not ready.
	early := startProc(t, "countersign", env, "serve")
	waitStatus(t, "http://"+httpAddr+"/readyz", 503, 20*time.Second)
	if err := early.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("serve exit after SIGTERM: %v", err)
	}

	out, err := exec.Command(filepath.Join(bin, "countersign"), "migrate", "--database-url", cluster.URL("countersign")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ledger schema at version") {
		t.Fatalf("migrate: %v\n%s", err, out)
	}

	srv := startProc(t, "countersign", env, "serve")
	waitStatus(t, "http://"+httpAddr+"/readyz", 200, 20*time.Second)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hr, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health = %v, %v", hr, err)
	}
	check := &authv3.CheckRequest{
		Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "e2e-1", Method: "POST", Host: "api.stripe.com", Path: "/v1/refunds",
			Headers: map[string]string{"authorization": "Bearer sk_live_not_a_countersign_credential"},
		}}},
	}
	// The TCP API listener does not speak ext_authz: only the Envoy socket does.
	if _, err := authv3.NewAuthorizationClient(conn).Check(cctx, check); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Check on the TCP API listener = %v, want Unimplemented", err)
	}
	envoy, err := grpc.NewClient(envoyAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer envoy.Close()
	resp, err := authv3.NewAuthorizationClient(envoy).Check(cctx, check)
	if err != nil {
		t.Fatal(err)
	}
	if codes.Code(resp.GetStatus().GetCode()) != codes.PermissionDenied || resp.GetDeniedResponse().GetStatus().GetCode() != 403 {
		t.Fatalf("Check = %v", resp)
	}
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &body); err != nil || body.Error.Code != "credential_unknown" {
		t.Fatalf("denied body %q", resp.GetDeniedResponse().GetBody())
	}
	// The rail key-shaped string the agent sent is never logged.
	if err := srv.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("serve exit after SIGTERM: %v", err)
	}
	if strings.Contains(srv.out.String(), "sk_live_not_a_countersign_credential") {
		t.Fatal("the presented credential appeared in the logs")
	}
}

func TestServeRejectsBadConfiguration(t *testing.T) {
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no database", nil, []string{"serve"}, "database-url (COUNTERSIGN_DATABASE_URL) is required"},
		{"bad env duration", []string{"COUNTERSIGN_DATABASE_URL=postgres://x/y", "COUNTERSIGN_SHUTDOWN_TIMEOUT=later"}, []string{"serve"}, "COUNTERSIGN_SHUTDOWN_TIMEOUT"},
		{"bad flag address", []string{"COUNTERSIGN_DATABASE_URL=postgres://x/y"}, []string{"serve", "--grpc-addr", "nowhere"}, "grpc-addr (COUNTERSIGN_GRPC_ADDR) must be host:port"},
		{"envoy listener on TCP", []string{"COUNTERSIGN_DATABASE_URL=postgres://x/y"}, []string{"serve", "--envoy-addr", "127.0.0.1:9192"},
			"an ALLOW answer carries the rail key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, "countersign"), tc.args...)
			cmd.Env = append(os.Environ(), tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("err = %v, output:\n%s\nwant mention of %q", err, out, tc.want)
			}
		})
	}
}

// TestDevStartsEverything runs `countersign-dev dev` (what `make run`
// runs): a private Postgres under its directory, migrated, served, with the
// mock rail and one egress listener per rail account. Every printed command
// answers as its comment says, on the first run and again on the next one
// over the same directory (each run refunds payments of its own); an
// unserved Host gets a JSON answer naming the served ones; SIGINT stops it
// all.
func TestDevStartsEverything(t *testing.T) {
	d := startDemo(t)
	waitStatus(t, "http://"+d.mockAddr+"/_mock/healthz", 200, 10*time.Second)
	out := d.p.out.String()
	for _, want := range []string{d.grpcAddr, "http://" + d.httpAddr + "/readyz", "http://" + d.mockAddr, "Ctrl-C"} {
		if !strings.Contains(out, want) {
			t.Fatalf("dev output lacks %q:\n%s", want, out)
		}
	}
	first := d.checkPrintedStory(t)

	// The demo seals its audit log with a key of its own: every record of
	// the story is sealed and verifies with the printed verifier key.
	ledgerURL := regexp.MustCompile(`(?m)^  ledger +(\S+)$`).FindStringSubmatch(out)
	verifierKey := regexp.MustCompile(`(?m)^  audit log \(sealed every 1s\) +verifier key (\S+)$`).FindStringSubmatch(out)
	if ledgerURL == nil || verifierKey == nil {
		t.Fatalf("dev output lacks the ledger URL or the audit verifier key:\n%s", out)
	}
	var verified string
	if !wait.Until(20*time.Second, func() bool {
		o, err := exec.Command(filepath.Join(bin, "countersign"), "audit", "verify", "--database-url", ledgerURL[1],
			"--audit-verifier-key", verifierKey[1]).CombinedOutput()
		verified = string(o)
		return err == nil && strings.Contains(verified, " 0 unsealed,") && !strings.Contains(verified, " 0 sealed records")
	}) {
		t.Fatalf("the demo's audit log is not sealed and verified:\n%s", verified)
	}

	// Whatever the Host, an SDK pointed elsewhere learns where to point it.
	req := curlRequest(t, d.step(t, "ALLOW", 0))
	req.Host = "stripe.local"
	status, h, body := send(t, req)
	if status != 404 || h.Get("Content-Type") != "application/json" || !json.Valid([]byte(body)) ||
		!strings.Contains(body, d.stripeBase) || !strings.Contains(body, d.razorpayBase) || !strings.Contains(body, `"code":"countersign_unknown_host"`) {
		t.Fatalf("unserved host: %d %s %s", status, h.Get("Content-Type"), body)
	}

	if err := d.p.stop(t, os.Interrupt, 30*time.Second); err != nil {
		t.Fatalf("dev exit after SIGINT: %v", err)
	}
	pidFile := filepath.Join(d.dir, "pg", "postmaster.pid")
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Fatalf("postgres still running after dev stopped (%s: %v)", pidFile, err)
	}

	// A second run reuses the directory, the owner, the agent and its
	// credentials, and teaches the same story on payments of its own.
	key := d.stripeKey
	d.start(t, d.args)
	if d.stripeKey != key {
		t.Fatalf("the second run printed another agent credential")
	}
	if second := d.checkPrintedStory(t); second == first {
		t.Fatalf("the second run refunds %s again", second)
	}
	if err := d.p.stop(t, os.Interrupt, 30*time.Second); err != nil {
		t.Fatalf("second dev exit: %v", err)
	}
}

// checkPrintedStory runs the printed commands as a newcomer would and
// checks each answers as its comment says: ALLOW, the replay, BLOCK, HOLD →
// approve → ALLOW, and Razorpay's refund. It returns the Stripe payment the
// run refunds.
func (d *demoRun) checkPrintedStory(t *testing.T) string {
	t.Helper()
	refundID := func(what string, status int, h http.Header, body string, replay bool) string {
		t.Helper()
		var r struct{ ID string }
		if err := json.Unmarshal([]byte(body), &r); status != 200 || err != nil || !strings.HasPrefix(r.ID, "re_") {
			t.Fatalf("%s: %d %s", what, status, body)
		}
		if got := h.Get("X-Countersign-Replay") == "true"; got != replay {
			t.Fatalf("%s: X-Countersign-Replay %q, want a replay: %v", what, h.Get("X-Countersign-Replay"), replay)
		}
		return r.ID
	}
	refusal := func(what string, status int, h http.Header, body, verdict string) string {
		t.Helper()
		var r struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal([]byte(body), &r); status != 403 || err != nil || h.Get("X-Countersign-Verdict") != verdict || r.Error.Message == "" {
			t.Fatalf("%s: %d %s %s, want 403 %s", what, status, h.Get("X-Countersign-Verdict"), body, verdict)
		}
		return r.Error.Code
	}
	do := func(step string, i int) (int, http.Header, string) {
		t.Helper()
		return send(t, curlRequest(t, d.step(t, step, i)))
	}

	s, h, b := do("ALLOW", 0)
	allowed := refundID("ALLOW", s, h, b, false)
	s, h, b = do("REPLAY", 0)
	if replayed := refundID("REPLAY", s, h, b, true); replayed != allowed {
		t.Fatalf("REPLAY answered %s, want the stored %s", replayed, allowed)
	}
	s, h, b = do("BLOCK", 0)
	if code := refusal("BLOCK", s, h, b, "BLOCK"); code != "amount_above_maximum" {
		t.Fatalf("BLOCK refused with %q", code)
	}

	before := d.approvals(t)
	s, h, b = do("HOLD", 0)
	refusal("HOLD", s, h, b, "HOLD")
	var held string
	for _, id := range d.approvals(t) {
		if !slices.Contains(before, id) {
			held = id
		}
	}
	if held == "" {
		t.Fatalf("the HOLD added no approval to the printed listing (before: %v)", before)
	}
	if out := d.owner(t, 2, held); !strings.Contains(out, held) {
		t.Fatalf("approve printed %q", out)
	}
	s, h, b = do("HOLD", 3)
	refundID("HOLD → approve → ALLOW", s, h, b, false)

	s, _, b = do("Razorpay", 0)
	var rr struct{ ID string }
	if err := json.Unmarshal([]byte(b), &rr); s != 200 || err != nil || !strings.HasPrefix(rr.ID, "rfnd_") {
		t.Fatalf("Razorpay: %d %s", s, b)
	}
	return curlForm(t, d.step(t, "ALLOW", 0)).Get("payment_intent")
}

// owner runs the i-th printed command of the HOLD step (an owner command,
// printed as the path of the running countersign-dev, which carries every
// countersign command) as printed, the approval id in place of APPROVAL_ID.
func (d *demoRun) owner(t *testing.T, i int, approval string) string {
	t.Helper()
	line := d.step(t, "HOLD", i)
	words := shellWords(strings.ReplaceAll(line, "APPROVAL_ID", approval))
	if len(words) < 3 || filepath.Base(words[0]) != "countersign-dev" || words[1] != "approvals" {
		t.Fatalf("HOLD command %d is not a countersign-dev approvals command: %q", i, line)
	}
	out, err := exec.Command(words[0], words[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	return string(out)
}

// approvals are the approval ids the printed listing command shows.
func (d *demoRun) approvals(t *testing.T) []string {
	t.Helper()
	return regexp.MustCompile(`(?m)^apr_\w+`).FindAllString(d.owner(t, 1, ""), -1)
}
