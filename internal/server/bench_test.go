package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/telemetry"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

type allowHarness struct {
	client   authv3.AuthorizationClient
	secret   string
	grpcAddr string
	// envoyAddr is the Envoy listener (ext_authz, ext_proc).
	envoyAddr string
	mockURL   string
	store     *ledger.Store
	agentID   string
	mock      *mockrail.Server
	conn      *grpc.ClientConn
	// ownerID owns the agent; ownerToken is its owner API credential.
	ownerID, ownerToken string
	httpAddr            string
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
	// tracer traces the server and its ledger; log replaces the discarded
	// log.
	tracer trace.TracerProvider
	log    *slog.Logger
}

// unlimitedAgent turns off the per-agent limits on rail reads and on
// decisions (on by default, config.DefaultAgentRailReadRate and
// DefaultAgentDecisionRate) for a test whose one agent sends hundreds of new
// requests at once to load something else: the budget, a window, a
// revocation race. TestRailReadsAreLimitedPerAgent and
// TestDecisionsAreLimitedPerAgent test the limits themselves.
var unlimitedAgent = harnessOption{cfg: func(c *config.Config) { c.AgentRailReadRate, c.AgentDecisionRate = 0, 0 }}

// bareRailHarness is railHarness without any mandate.
func bareRailHarness(b testing.TB, opts ...harnessOption) *allowHarness {
	b.Helper()
	return railHarnessOn(b, pgtest.NewDatabase(b), opts...)
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
	storeOpts := ledger.Options{MaxConns: 32}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var serverOpts []Option
	for _, o := range opts {
		if o.tracer != nil {
			storeOpts.Tracer = telemetry.NewPgxTracer(o.tracer)
			serverOpts = append(serverOpts, WithTracerProvider(o.tracer))
		}
		if o.log != nil {
			log = o.log
		}
	}
	store, err := ledger.Open(ctx, url, storeOpts)
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
	srv, err := New(cfg, store, rs, log, serverOpts...)
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
	return &allowHarness{client: authv3.NewAuthorizationClient(envoy), secret: secret, grpcAddr: srv.GRPCAddr(), envoyAddr: srv.EnvoyAddr(), mockURL: ts.URL,
		store: store, agentID: agent.ID, mock: mock, conn: conn, ownerID: owner.ID, ownerToken: ownerToken, httpAddr: srv.HTTPAddr()}
}
