package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// BenchmarkAllowPath measures the ALLOW path end to end over real gRPC:
// Envoy's Check → credential → referent read at the (in-process) mock rail
// → intent and durable IN_FLIGHT attempt committed in PostgreSQL → decision
// recorded → response. Every operation is a new action (a new SIK) on its
// own payment, under a mandate of grants (no budget or window: decisions
// under it do not take turns).
//
//	go test -run '^$' -bench AllowPath -benchtime 2000x ./internal/server/
func BenchmarkAllowPath(b *testing.B) {
	for _, c := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", c), func(b *testing.B) {
			h := benchHarness(b)
			// One payment per operation, as refunds spread over many payments.
			for i := range b.N {
				if _, err := h.mock.AddPayment(mockrail.Payment{Rail: mockrail.Stripe, ID: fmt.Sprintf("pi_bench_%d", i), Amount: 100000, Currency: "usd"}); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range c {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						t0 := time.Now()
						resp, err := h.client.Check(context.Background(), h.request(i))
						lat[i] = time.Since(t0)
						if err != nil || codes.Code(resp.GetStatus().GetCode()) != codes.OK {
							b.Errorf("op %d: %v %v", i, err, resp.GetDeniedResponse().GetBody())
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
		})
	}
}

// BenchmarkCommitFloor runs pgbench against the same kind of PostgreSQL the
// ALLOW path uses: one single-row INSERT per transaction, synchronous_commit
// on, at 1 and 16 clients. It is the floor the ALLOW path is compared with.
//
//	go test -run '^$' -bench CommitFloor ./internal/server/
func BenchmarkCommitFloor(b *testing.B) {
	pgbench, err := pgbenchPath()
	if err != nil {
		b.Fatal(err)
	}
	url := pgtest.NewDatabase(b)
	ctx := context.Background()
	// The pgbench workload's own table (benchmark scaffolding, not ledger SQL).
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE commit_floor (id bigserial PRIMARY KEY, v int NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	conn.Close(ctx)
	script := filepath.Join(b.TempDir(), "insert.sql")
	if err := os.WriteFile(script, []byte("INSERT INTO commit_floor (v) VALUES (1);\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	tpsRE := regexp.MustCompile(`tps = ([0-9.]+)`)
	latRE := regexp.MustCompile(`latency average = ([0-9.]+) ms`)
	for _, c := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", c), func(b *testing.B) {
			out, err := exec.Command(pgbench, "-n", "-f", script, "-c", strconv.Itoa(c), "-j", strconv.Itoa(min(c, 2)),
				"-T", "5", url).CombinedOutput()
			if err != nil {
				b.Fatalf("pgbench: %v\n%s", err, out)
			}
			tps, lat := tpsRE.FindSubmatch(out), latRE.FindSubmatch(out)
			if tps == nil || lat == nil {
				b.Fatalf("pgbench output not understood:\n%s", out)
			}
			t, _ := strconv.ParseFloat(string(tps[1]), 64)
			l, _ := strconv.ParseFloat(string(lat[1]), 64)
			b.ReportMetric(t, "commits/s")
			b.ReportMetric(l, "avg-ms")
		})
	}
}

type allowHarness struct {
	client   authv3.AuthorizationClient
	secret   string
	grpcAddr string
	mockURL  string
	store    *ledger.Store
	agentID  string
	mock     *mockrail.Server
	conn     *grpc.ClientConn
	// ownerID owns the agent; ownerToken is its owner API credential.
	ownerID, ownerToken string
	httpAddr            string
	// envoyAddr is the ext_authz/ext_proc listener (a Unix socket).
	envoyAddr string
}

func (h *allowHarness) request(i int64) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{"rail_account": "acct_bench"},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: strconv.FormatInt(i, 10), Method: "POST", Host: "stripe.local", Path: "/v1/refunds",
			Headers: map[string]string{"authorization": "Bearer " + h.secret, "content-type": "application/x-www-form-urlencoded"},
			Body:    "payment_intent=pi_bench_" + strconv.FormatInt(i, 10) + "&amount=1000",
		}},
	}}
}

func benchHarness(b *testing.B) *allowHarness { return railHarness(b) }

// railHarness is a server with one Stripe rail account (acct_bench) on an
// in-process mock rail holding payment pi_bench, an execute credential and
// a generous mandate.
func railHarness(b testing.TB, opts ...harnessOption) *allowHarness {
	b.Helper()
	h := railHarnessOn(b, pgtest.NewDatabase(b), opts...)
	grantAll(b, h.store, h.agentID, "acct_bench")
	return h
}

// harnessOption adjusts railHarnessOn's mock rail or server configuration.
type harnessOption struct {
	mock []mockrail.Option
	cfg  func(*config.Config)
}

// bareRailHarness is railHarness without any mandate.
func bareRailHarness(b testing.TB) *allowHarness {
	b.Helper()
	return railHarnessOn(b, pgtest.NewDatabase(b))
}

// railHarnessOn is bareRailHarness over the migrated database at url.
func railHarnessOn(b testing.TB, url string, opts ...harnessOption) *allowHarness {
	b.Helper()
	ctx := context.Background()
	mockOpts := []mockrail.Option{mockrail.WithPayments(mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_bench", Amount: 1 << 50, Currency: "usd"})}
	for _, o := range opts {
		mockOpts = append(mockOpts, o.mock...)
	}
	mock, err := mockrail.New(mockOpts...)
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(mock)
	b.Cleanup(func() { mock.Close(); ts.Close() })
	keyFile := filepath.Join(b.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(mockrail.DefaultStripeKey), 0o600); err != nil {
		b.Fatal(err)
	}
	rs, err := rails.New(rails.File{Rails: []rails.AccountConfig{{Account: "acct_bench", Rail: "stripe",
		Hosts: []string{"api.stripe.com"}, BaseURL: ts.URL, KeyFile: keyFile}}},
		rails.Adapters{sik.RailStripe: func() rail.Adapter { return stripe.New() }}, nil)
	if err != nil {
		b.Fatal(err)
	}
	store, err := ledger.Open(ctx, url, ledger.Options{MaxConns: 32})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(store.Close)
	cfg := config.Defaults()
	cfg.DatabaseURL, cfg.GRPCAddr, cfg.HTTPAddr, cfg.ReconcileInterval = url, "127.0.0.1:0", "127.0.0.1:0", 0
	cfg.EnvoyAddr = testEnvoyAddr(b)
	cfg.LeaseOwner, cfg.OutboxInterval = "bench", 100*time.Millisecond
	cfg.WebhookAllowNetworks = "127.0.0.1" // test webhook receivers listen on loopback
	for _, o := range opts {
		if o.cfg != nil {
			o.cfg(&cfg)
		}
	}
	srv, err := New(cfg, store, rs, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	envoy := dialTest(b, srv.EnvoyAddr())
	b.Cleanup(func() { envoy.Close() })
	owner, ownerToken, _, err := ownerauth.Bootstrap(ctx, store, "bench owner", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	agent, err := store.CreateAgent(ctx, owner.ID, "bench")
	if err != nil {
		b.Fatal(err)
	}
	secret, hash, err := credential.Generate()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := store.IssueCredential(ctx, agent.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash); err != nil {
		b.Fatal(err)
	}
	return &allowHarness{client: authv3.NewAuthorizationClient(envoy), secret: secret, grpcAddr: srv.GRPCAddr(), mockURL: ts.URL,
		store: store, agentID: agent.ID, mock: mock, conn: conn, ownerID: owner.ID, ownerToken: ownerToken, httpAddr: srv.HTTPAddr(),
		envoyAddr: srv.EnvoyAddr()}
}

func pgbenchPath() (string, error) {
	dir, err := pgtest.Binaries()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "pgbench"), nil
}
