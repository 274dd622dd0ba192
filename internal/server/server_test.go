package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, migrate) }

func migrate(ctx context.Context, url string) error {
	_, err := ledger.Migrate(ctx, url, nil)
	return err
}

// harness is a running server over its own database.
type harness struct {
	store *ledger.Store
	srv   *Server
	conn  *grpc.ClientConn // the API listener
	envoy *grpc.ClientConn // the Envoy listener (ext_authz, ext_proc)
	http  string
}

// testEnvoyAddr is a Unix socket for the Envoy listener in a directory of
// its own, short enough for the socket path limit.
func testEnvoyAddr(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cs-envoy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return "unix:" + filepath.Join(dir, "envoy.sock")
}

func dialTest(t testing.TB, target string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func start(t *testing.T, url string) *harness {
	t.Helper()
	return startWith(t, url, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// startWith is start with the configuration changed by configure (if not
// nil), logging to log.
func startWith(t *testing.T, url string, configure func(*config.Config), log *slog.Logger) *harness {
	t.Helper()
	// Registered first, so it runs last: after the server, client and pool
	// have stopped, none of their goroutines may remain.
	t.Cleanup(func() {
		goleak.VerifyNone(t, pgtest.IgnoreServerGoroutines())
	})
	ctx := context.Background()
	// A slow connect on a loaded machine is not what these tests judge.
	store, err := ledger.Open(ctx, url, ledger.Options{ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Defaults()
	cfg.DatabaseURL = url
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.EnvoyAddr = "127.0.0.1:0", "127.0.0.1:0", testEnvoyAddr(t)
	cfg.ReadinessInterval = 100 * time.Millisecond
	if configure != nil {
		configure(&cfg)
	}
	srv, err := New(cfg, store, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	envoy := dialTest(t, srv.EnvoyAddr())
	t.Cleanup(func() {
		conn.Close()
		envoy.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		store.Close()
	})
	return &harness{store: store, srv: srv, conn: conn, envoy: envoy, http: "http://" + srv.HTTPAddr()}
}

func (h *harness) check(t *testing.T, id, auth string) *authv3.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	headers := map[string]string{"content-type": "application/x-www-form-urlencoded"}
	if auth != "" {
		headers["authorization"] = auth
	}
	resp, err := authv3.NewAuthorizationClient(h.envoy).Check(ctx, &authv3.CheckRequest{
		Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: id, Method: "POST", Host: "api.stripe.com", Path: "/v1/refunds", Scheme: "http",
			Headers: headers, Body: "payment_intent=pi_1&amount=1000",
		}}},
	})
	if err != nil {
		t.Fatalf("Check returned a gRPC error (a deny must be a response): %v", err)
	}
	return resp
}

func (h *harness) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(h.http + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *harness) health(t *testing.T) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(h.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: authv3.Authorization_ServiceDesc.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatus()
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type refusal struct {
	Error struct {
		Code, Message, Verdict string
	} `json:"error"`
}

func deniedCode(t *testing.T, resp *authv3.CheckResponse) (int, string) {
	t.Helper()
	if codes.Code(resp.GetStatus().GetCode()) != codes.PermissionDenied {
		t.Fatalf("status = %v, want PERMISSION_DENIED", resp.GetStatus())
	}
	d := resp.GetDeniedResponse()
	var r refusal
	if err := json.Unmarshal([]byte(d.GetBody()), &r); err != nil {
		t.Fatalf("denied body %q is not JSON: %v", d.GetBody(), err)
	}
	return int(d.GetStatus().GetCode()), r.Error.Code
}

func TestCheckRecordsEveryDecision(t *testing.T) {
	h := start(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	agent, err := h.store.CreateAgent(ctx, "own_test", "refund-bot")
	if err != nil {
		t.Fatal(err)
	}
	secret, hash, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := h.store.IssueCredential(ctx, agent.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash)
	if err != nil {
		t.Fatal(err)
	}
	unknown, _, _ := credential.Generate()

	cases := []struct {
		name, id, auth string
		wantStatus     int
		wantCode       string
		wantAgent      string
	}{
		{"missing credential", "r-missing", "", 403, "credential_missing", ""},
		{"unknown credential", "r-unknown", "Bearer " + unknown, 403, "credential_unknown", ""},
		{"known agent, no adapter yet", "r-known", "Bearer " + secret, 403, "route_unknown", agent.ID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, code := deniedCode(t, h.check(t, tc.id, tc.auth))
			if status != tc.wantStatus || code != tc.wantCode {
				t.Fatalf("denied %d %s, want %d %s", status, code, tc.wantStatus, tc.wantCode)
			}
			rows, err := h.store.DecisionsByRequest(ctx, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 {
				t.Fatalf("%d decision rows for %s, want 1", len(rows), tc.id)
			}
			d := rows[0]
			if d.Verdict != "BLOCK" || d.ReasonCode != tc.wantCode || d.Source != "ext_authz" ||
				d.AgentID != tc.wantAgent || d.Method != "POST" || d.Host != "api.stripe.com" || d.Path != "/v1/refunds" {
				t.Fatalf("decision row %+v", d)
			}
			if tc.wantAgent != "" && d.CredentialID != cred.ID {
				t.Fatalf("decision credential = %q, want %q", d.CredentialID, cred.ID)
			}
		})
	}

	// The revoked credential is refused with its own reason.
	if err := h.store.RevokeCredential(ctx, cred.ID); err != nil {
		t.Fatal(err)
	}
	if _, code := deniedCode(t, h.check(t, "r-revoked", "Bearer "+secret)); code != "credential_revoked" {
		t.Fatalf("revoked credential: %s", code)
	}

	// Metrics count the decisions by verdict and reason.
	_, metrics := h.get(t, "/metrics")
	if !strings.Contains(metrics, `countersign_decisions_total{reason_code="route_unknown",source="ext_authz",verdict="BLOCK"} 1`) {
		t.Fatalf("metrics lack the decision counter:\n%s", grepLines(metrics, "countersign_"))
	}
}

func TestLedgerOutageFailsClosedAndRecovers(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.NewCluster(t)
	if err := cluster.CreateDatabase(ctx, "countersign", ""); err != nil {
		t.Fatal(err)
	}
	url := cluster.URL("countersign")
	if err := migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	h := start(t, url)
	eventually(t, "readyz 200", func() bool { s, _ := h.get(t, "/readyz"); return s == 200 })
	eventually(t, "health SERVING", func() bool { return h.health(t) == healthpb.HealthCheckResponse_SERVING })

	if err := cluster.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// /readyz answers from a result up to readyzFreshFor old (readiness.go).
	var down string
	eventually(t, "readyz 503 with postgres down", func() bool {
		s, body := h.get(t, "/readyz")
		down = fmt.Sprintf("%d %q", s, body)
		return s == http.StatusServiceUnavailable
	})
	if !strings.Contains(down, "ledger unreachable") {
		t.Fatalf("readyz with postgres down = %s", down)
	}
	eventually(t, "health NOT_SERVING", func() bool { return h.health(t) == healthpb.HealthCheckResponse_NOT_SERVING })
	status, code := deniedCode(t, h.check(t, "r-down", "Bearer csk_"+strings.Repeat("a", 52)))
	if status != 503 || code != "ledger_unavailable" {
		t.Fatalf("Check with postgres down: %d %s, want 503 ledger_unavailable", status, code)
	}
	if s, _ := h.get(t, "/healthz"); s != 200 {
		t.Fatalf("liveness must not depend on the ledger, got %d", s)
	}

	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "readyz 200 again", func() bool { s, _ := h.get(t, "/readyz"); return s == 200 })
	eventually(t, "health SERVING again", func() bool { return h.health(t) == healthpb.HealthCheckResponse_SERVING })
	if _, code := deniedCode(t, h.check(t, "r-back", "")); code != "credential_missing" {
		t.Fatalf("after recovery: %s", code)
	}
	rows, err := h.store.DecisionsByRequest(ctx, "r-back")
	if err != nil || len(rows) != 1 {
		t.Fatalf("decision after recovery not recorded: %v %v", rows, err)
	}
	if rows, _ := h.store.DecisionsByRequest(ctx, "r-down"); len(rows) != 0 {
		t.Fatalf("a decision was recorded while the ledger was down: %+v", rows)
	}
}

func TestNotReadyWhileSchemaBehind(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.NewCluster(t)
	if err := cluster.CreateDatabase(ctx, "empty", ""); err != nil {
		t.Fatal(err)
	}
	h := start(t, cluster.URL("empty"))
	s, body := h.get(t, "/readyz")
	if s != http.StatusServiceUnavailable || !strings.Contains(body, "schema is behind") {
		t.Fatalf("readyz on unmigrated ledger = %d %q", s, body)
	}
	eventually(t, "health NOT_SERVING", func() bool { return h.health(t) == healthpb.HealthCheckResponse_NOT_SERVING })
	if err := migrate(ctx, cluster.URL("empty")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "readyz after migrate", func() bool { s, _ := h.get(t, "/readyz"); return s == 200 })
}

func TestHTTPSurface(t *testing.T) {
	h := start(t, pgtest.NewDatabase(t))
	if s, body := h.get(t, "/healthz"); s != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("healthz = %d %q", s, body)
	}
	s, body := h.get(t, "/openapi.json")
	var doc struct {
		Swagger string         `json:"swagger"`
		Paths   map[string]any `json:"paths"`
	}
	if s != 200 || json.Unmarshal([]byte(body), &doc) != nil || doc.Swagger != "2.0" || doc.Paths["/v1/agents"] == nil {
		t.Fatalf("openapi.json = %d, swagger %q, %d paths", s, doc.Swagger, len(doc.Paths))
	}
	// The owner API refuses a caller without an owner credential (401).
	s, body = h.get(t, "/v1/agents")
	if s != http.StatusUnauthorized || !strings.Contains(body, "UNAUTHENTICATED") {
		t.Fatalf("GET /v1/agents = %d %s, want 401", s, body)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestUnixSocketListener: the Envoy-facing gRPC listener can be a unix
// socket (so an agent sharing the pod's network cannot call Check), with
// permissions for owner and group only; REST still reaches gRPC through it.
func TestUnixSocketListener(t *testing.T) {
	dir, err := os.MkdirTemp("", "cs-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "grpc.sock")
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	store, err := ledger.Open(ctx, url, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg := config.Defaults()
	cfg.DatabaseURL, cfg.GRPCAddr, cfg.HTTPAddr, cfg.ReconcileInterval = url, "unix:"+sock, "127.0.0.1:0", 0
	cfg.EnvoyAddr = "unix:" + sock + ".envoy"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket %s: %v %v", sock, fi, err)
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	envoy := dialTest(t, srv.EnvoyAddr())
	defer envoy.Close()
	h := &harness{store: store, srv: srv, conn: conn, envoy: envoy, http: "http://" + srv.HTTPAddr()}
	if _, code := deniedCode(t, h.check(t, "r-unix", "")); code != "credential_missing" {
		t.Fatalf("Check over the socket: %s", code)
	}
	if s, _ := h.get(t, "/v1/agents"); s != http.StatusUnauthorized {
		t.Fatalf("REST through the socket = %d", s)
	}
	// A relative socket path is refused at start.
	bad := cfg
	bad.GRPCAddr = "unix:grpc.sock"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "must be absolute") {
		t.Fatalf("relative socket path: %v", err)
	}
}

// TestRailKeyListenerIsItsOwn: the protocols whose ALLOW carries the rail
// key (ext_authz, ext_proc) answer only on the Envoy listener; the API
// listener, which an agent in the pod can reach, does not know them, and
// the Envoy listener answers nothing but them and health.
func TestRailKeyListenerIsItsOwn(t *testing.T) {
	h := start(t, pgtest.NewDatabase(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/v1/refunds", Headers: map[string]string{"authorization": "Bearer csk_x"}}}}}
	if _, err := authv3.NewAuthorizationClient(h.conn).Check(ctx, check); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Check on the API listener = %v, want Unimplemented", err)
	}
	st, err := extprocv3.NewExternalProcessorClient(h.conn).Process(ctx)
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("ext_proc on the API listener = %v, want Unimplemented", err)
	}
	if _, err := authv3.NewAuthorizationClient(h.envoy).Check(ctx, check); err != nil {
		t.Fatalf("Check on the Envoy listener: %v", err)
	}
	_, err = countersignv1.NewOwnerServiceClient(h.envoy).ListAgents(ctx, &countersignv1.ListAgentsRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("the owner API on the Envoy listener = %v, want Unimplemented", err)
	}
	_, err = countersignv1.NewDecisionServiceClient(h.envoy).GetIntent(ctx, &countersignv1.DecisionServiceGetIntentRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("the decision API on the Envoy listener = %v, want Unimplemented", err)
	}
	if r, err := healthpb.NewHealthClient(h.envoy).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() == healthpb.HealthCheckResponse_UNKNOWN {
		t.Fatalf("health on the Envoy listener = %v, %v", r, err)
	}
}

// TestAPIListenerAnswersNobodyUnauthenticated: besides health (SERVING or
// not, nothing more), nothing on the API listener answers a caller without
// a credential; reflection is off unless asked for.
func TestAPIListenerAnswersNobodyUnauthenticated(t *testing.T) {
	h := start(t, pgtest.NewDatabase(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := reflectionpb.NewServerReflectionClient(h.conn).ServerReflectionInfo(ctx)
	if err == nil {
		// A Send that finds the stream already closed says io.EOF; the
		// status is what Recv then returns.
		_ = st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection without a credential = %v, want Unimplemented (off by default)", err)
	}
	if _, err := countersignv1.NewOwnerServiceClient(h.conn).ListAgents(ctx, &countersignv1.ListAgentsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("the owner API without a credential = %v, want Unauthenticated", err)
	}
	if _, err := countersignv1.NewDecisionServiceClient(h.conn).GetIntent(ctx, &countersignv1.DecisionServiceGetIntentRequest{RailAccount: "acct", Sik: "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("the decision API without a credential = %v, want Unauthenticated", err)
	}
}
