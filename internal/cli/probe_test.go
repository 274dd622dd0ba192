package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/inject"
	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// socketDir is a directory for test sockets with a path short enough for
// sun_path (t.TempDir's can pass 108 bytes).
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "csprobe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// startServe runs `countersign serve` in process over databaseURL with its
// API on a Unix socket, and returns that address (unix:/path) once the
// process answers grpc.health.v1 there.
func startServe(t *testing.T, databaseURL string) string {
	t.Helper()
	dir := socketDir(t)
	api := "unix:" + filepath.Join(dir, "api.sock")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		var out, errOut strings.Builder
		root := NewRoot(&out, &errOut)
		root.SetArgs([]string{"serve", "--database-url", databaseURL, "--grpc-addr", api,
			"--envoy-addr", "unix:" + filepath.Join(dir, "envoy.sock"), "--http-addr", "127.0.0.1:0",
			"--readiness-interval", "100ms", "--log-level", "error"})
		done <- root.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	var r cliResult
	if !wait.Until(20*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v", err)
		default:
		}
		r = runCLI(t, "", "probe", "--server", api)
		return r.err == nil
	}) {
		t.Fatalf("serve does not answer on %s: %v", api, r.err)
	}
	return api
}

// waitProbe runs probe with args until its error says want ("" for none),
// or fails the test after a deadline; it returns the last result.
func waitProbe(t *testing.T, want string, args ...string) cliResult {
	t.Helper()
	var r cliResult
	if !wait.Until(20*time.Second, func() bool {
		r = runCLI(t, "", append([]string{"probe"}, args...)...)
		return (want == "" && r.err == nil) || (want != "" && r.err != nil && strings.Contains(r.err.Error(), want))
	}) {
		t.Fatalf("probe %v = %q, %v; want error %q", args, r.out, r.err, want)
	}
	return r
}

// TestProbeAgainstServe: `countersign probe` over a real serve's API
// socket: live whatever the ledger says, ready only once SERVING; with the
// ledger down or its schema behind it is live and not ready.
func TestProbeAgainstServe(t *testing.T) {
	schemaBehind := func(t testing.TB) string {
		url := pgtest.NewDatabase(t)
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(t.Context(), `UPDATE goose_db_version SET is_applied = false
			WHERE version_id = (SELECT max(version_id) FROM goose_db_version)`); err != nil {
			t.Fatal(err)
		}
		return url
	}
	ledgerDown := func(t testing.TB) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		return "postgres://countersign@" + addr + "/countersign?sslmode=disable&connect_timeout=1"
	}
	for _, tc := range []struct {
		name     string
		database func(t testing.TB) string
		ready    bool
	}{
		{"ledger current", pgtest.NewDatabase, true},
		{"ledger down", ledgerDown, false},
		{"schema behind", schemaBehind, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := startServe(t, tc.database(t))
			if !tc.ready {
				r := waitProbe(t, "not ready: "+api+" answers NOT_SERVING", "--ready", "--server", api)
				if r.out != "" {
					t.Fatalf("a failed probe printed %q", r.out)
				}
				// Still live: a ledger outage must not have the kubelet
				// restart Countersign.
				if r := runCLI(t, "", "probe", "--server", api); r.err != nil || r.out != "live: "+api+" answers (NOT_SERVING)\n" {
					t.Fatalf("liveness probe = %q, %v", r.out, r.err)
				}
				return
			}
			if r := waitProbe(t, "", "--ready", "--server", api); r.out != "ready: "+api+" is SERVING\n" {
				t.Fatalf("readiness probe printed %q", r.out)
			}
			if r := runCLI(t, "", "probe", "--server", api); r.err != nil || r.out != "live: "+api+" answers (SERVING)\n" {
				t.Fatalf("liveness probe = %q, %v", r.out, r.err)
			}
			// The injector's probes, as the kubelet runs them (with
			// /proc/1/exe for the binary), find the server from the
			// container's COUNTERSIGN_GRPC_ADDR.
			t.Setenv(config.EnvName("grpc-addr"), api)
			startup, liveness := inject.ProbeCommands()
			for _, cmd := range [][]string{startup, liveness} {
				if r := runCLI(t, "", cmd[1:]...); r.err != nil {
					t.Fatalf("the injector's probe %v: %v", cmd, r.err)
				}
			}
		})
	}
}

// TestProbeFailures: nothing listening, a server that never answers, an
// address off this machine, and no address at all each fail, saying why.
func TestProbeFailures(t *testing.T) {
	dir := socketDir(t)
	silent := filepath.Join(dir, "silent.sock")
	l, err := net.Listen("unix", silent)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	for _, tc := range []struct {
		name string
		env  string
		args []string
		want string
	}{
		{"no socket", "", []string{"--server", "unix:" + filepath.Join(dir, "none.sock")}, "not live: cannot reach unix:" + filepath.Join(dir, "none.sock")},
		{"nothing on the port", "", []string{"--server", closedAddr}, "not live: cannot reach " + closedAddr},
		{"ready, nothing listening", "", []string{"--ready", "--server", closedAddr}, "not live: cannot reach " + closedAddr},
		{"no answer", "", []string{"--server", "unix:" + silent, "--timeout", "300ms"}, "not live: no answer from unix:" + silent + " within 300ms"},
		{"not local", "", []string{"--server", "10.0.0.7:9191"}, `refusing to probe --server "10.0.0.7:9191": it is neither a unix socket nor a loopback address`},
		{"not local, host name", "", []string{"--server", "countersign.example.com:9191"}, "refusing to probe"},
		{"variable not local", "10.0.0.7:9191", nil, `refusing to probe COUNTERSIGN_GRPC_ADDR "10.0.0.7:9191"`},
		{"variable malformed", "https://countersign.example.com", nil, `COUNTERSIGN_GRPC_ADDR "https://countersign.example.com" must be host:port or unix:/path`},
		{"no address", "", nil, "say which server to probe: --server unix:/path (or 127.0.0.1:port), or set COUNTERSIGN_GRPC_ADDR"},
		{"no timeout", "", []string{"--server", "unix:" + silent, "--timeout", "0s"}, "--timeout must be more than 0"},
		{"an argument", "", []string{"unix:" + silent}, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(config.EnvName("grpc-addr"), tc.env)
			start := time.Now()
			r := runCLI(t, "", append([]string{"probe"}, tc.args...)...)
			if r.err == nil || !strings.Contains(r.err.Error(), tc.want) {
				t.Fatalf("probe %v = %q, %v; want an error containing %q", tc.args, r.out, r.err, tc.want)
			}
			if r.out != "" {
				t.Fatalf("a failed probe printed %q", r.out)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("probe took %s: longer than any kubelet timeout it runs under", took)
			}
		})
	}
}

// TestProbeStatuses: liveness takes any health answer; readiness only
// SERVING. A fake health server stands in for the states serve cannot be
// put in from outside (UNKNOWN, SERVICE_UNKNOWN) and for serve's wildcard
// listen address in COUNTERSIGN_GRPC_ADDR.
func TestProbeStatuses(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	go func() { _ = g.Serve(l) }()
	defer g.Stop()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	listenAddr := ":" + port // as serve is told to listen
	for _, st := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVING,
		healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_UNKNOWN, healthpb.HealthCheckResponse_SERVICE_UNKNOWN} {
		t.Run(st.String(), func(t *testing.T) {
			hs.SetServingStatus("", st)
			t.Setenv(config.EnvName("grpc-addr"), listenAddr)
			want := fmt.Sprintf("live: %s answers (%s)\n", listenAddr, st)
			if r := runCLI(t, "", "probe"); r.err != nil || r.out != want {
				t.Fatalf("liveness = %q, %v; want %q", r.out, r.err, want)
			}
			r := runCLI(t, "", "probe", "--ready")
			if st == healthpb.HealthCheckResponse_SERVING {
				if r.err != nil || r.out != "ready: "+listenAddr+" is SERVING\n" {
					t.Fatalf("readiness = %q, %v", r.out, r.err)
				}
				return
			}
			if r.err == nil || !strings.Contains(r.err.Error(), "not ready: "+listenAddr+" answers "+st.String()) {
				t.Fatalf("readiness = %q, %v", r.out, r.err)
			}
		})
	}
	// A gRPC server without grpc.health.v1 is not a countersign.
	bare := grpc.NewServer()
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = bare.Serve(bl) }()
	defer bare.Stop()
	if r := runCLI(t, "", "probe", "--server", bl.Addr().String()); r.err == nil || !strings.Contains(r.err.Error(), "answered grpc.health.v1 Check with Unimplemented") {
		t.Fatalf("probe of a server without health = %q, %v", r.out, r.err)
	}
}

// TestListenToDial: serve's wildcard listen addresses are probed on
// loopback; everything else is dialled as given.
func TestListenToDial(t *testing.T) {
	for in, want := range map[string]string{
		":9191": "127.0.0.1:9191", "0.0.0.0:9191": "127.0.0.1:9191", "[::]:9191": "[::1]:9191",
		"127.0.0.1:9191": "127.0.0.1:9191", "10.0.0.7:9191": "10.0.0.7:9191",
		"unix:/var/run/countersign/api.sock": "unix:/var/run/countersign/api.sock", "garbage": "garbage",
	} {
		if got := listenToDial(in); got != want {
			t.Errorf("listenToDial(%q) = %q, want %q", in, got, want)
		}
	}
}
