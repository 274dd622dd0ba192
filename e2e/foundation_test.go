package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/countersign/countersign/internal/testing/pgtest"
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
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	env := []string{
		"COUNTERSIGN_DATABASE_URL=" + cluster.URL("countersign"),
		"COUNTERSIGN_GRPC_ADDR=" + grpcAddr,
		"COUNTERSIGN_HTTP_ADDR=" + httpAddr,
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
	resp, err := authv3.NewAuthorizationClient(conn).Check(cctx, &authv3.CheckRequest{
		Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "e2e-1", Method: "POST", Host: "api.stripe.com", Path: "/v1/refunds",
			Headers: map[string]string{"authorization": "Bearer sk_live_not_a_countersign_credential"},
		}}},
	})
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

// TestDevStartsEverything runs `countersign dev` (what `make run` runs):
// a private Postgres under its directory, migrated, served; SIGINT stops it all.
func TestDevStartsEverything(t *testing.T) {
	dir, err := os.MkdirTemp("", "countersign-e2e-dev-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The postgres OS user (used when tests run as root) must reach the directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr, mockAddr, egressAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	run := func() *proc {
		return startProc(t, "countersign", nil, "dev", "--dir", dir, "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
			"--mockrail-addr", mockAddr, "--egress-addr", egressAddr)
	}
	p := run()
	waitStatus(t, "http://"+httpAddr+"/readyz", 200, 60*time.Second)
	waitStatus(t, "http://"+mockAddr+"/_mock/healthz", 200, 10*time.Second)
	for _, want := range []string{grpcAddr, "http://" + httpAddr + "/readyz", "http://" + mockAddr, "Ctrl-C"} {
		if !strings.Contains(p.out.String(), want) {
			t.Fatalf("dev output lacks %q:\n%s", want, p.out.String())
		}
	}
	// The printed demo works: ALLOW within the mandate, BLOCK above it.
	m := regexp.MustCompile(`Bearer (csk_[a-z2-7]+)' -d payment_intent=pi_demo_1 -d amount=1500`).FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("dev printed no demo commands:\n%s", p.out.String())
	}
	demo := func(amount string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+egressAddr+"/v1/refunds",
			strings.NewReader("payment_intent=pi_demo_1&amount="+amount))
		req.Host = "stripe.local"
		req.Header.Set("Authorization", "Bearer "+m[1])
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if s, body := demo("1500"); s != 200 || !strings.Contains(body, `"re_`) {
		t.Fatalf("demo ALLOW: %d %s", s, body)
	}
	if s, body := demo("60000"); s != 403 || !strings.Contains(body, "amount_above_maximum") {
		t.Fatalf("demo BLOCK: %d %s", s, body)
	}
	if err := p.stop(t, os.Interrupt, 30*time.Second); err != nil {
		t.Fatalf("dev exit after SIGINT: %v", err)
	}
	pidFile := filepath.Join(dir, "pg", "postmaster.pid")
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Fatalf("postgres still running after dev stopped (%s: %v)", pidFile, err)
	}
	// A second run reuses the same data directory and comes up again.
	p = run()
	waitStatus(t, "http://"+httpAddr+"/readyz", 200, 60*time.Second)
	if err := p.stop(t, os.Interrupt, 30*time.Second); err != nil {
		t.Fatalf("second dev exit: %v", err)
	}
}
