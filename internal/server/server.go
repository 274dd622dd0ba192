// Package server wires Countersign's listeners: the Envoy listener (ext_authz
// and ext_proc, whose ALLOW carries the rail key, and health), gRPC (the
// countersign.v1 services, each caller authenticated, health; reflection
// only when asked for)
// and HTTP (REST through grpc-gateway, the owner console under /console/,
// /metrics, /healthz, /readyz, /openapi.json).
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"buf.build/go/protovalidate"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/mod/sumdb/note"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/encoding/protojson"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/gen/openapi"
	"github.com/countersign/countersign/internal/api"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/extauthz"
	"github.com/countersign/countersign/internal/extproc"
	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/metrics"
	"github.com/countersign/countersign/internal/outbox"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/quota"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/reconcile"
	"github.com/countersign/countersign/internal/telemetry"
)

// Server is one Countersign process's listeners.
type Server struct {
	cfg     config.Config
	log     *slog.Logger
	metrics *metrics.Metrics
	tracer  trace.TracerProvider
	ready   *readiness
	grpc    *grpc.Server
	gateway *grpc.Server // the same services, for the REST gateway only
	envoy   *grpc.Server // ext_authz and ext_proc only: its own listener (C1)
	http    *http.Server

	store      *ledger.Store
	rails      *rails.Registry
	reconciler *reconcile.Worker
	webhooks   outbox.AddressPolicy
	peers      quota.Peers
	console    *console.Console
	// auditSigner signs the audit log's checkpoints; nil: no sealing here.
	auditSigner note.Signer

	grpcLis, envoyLis, httpLis net.Listener
	httpSlots                  *slotListener // the HTTP listener's connections (httpMaxConns)
	// gatewayLis is the REST gateway's in-process way into s.gateway: a call
	// on it is the gateway's own, so the HTTP peer it reports is believed
	// (quota.Peers).
	gatewayLis *quota.GatewayListener
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	errs       chan error
}

// Option adjusts a server beyond its configuration.
type Option func(*options)

type options struct {
	tracer trace.TracerProvider
}

// WithTracerProvider traces decisions, commits, Envoy's exchanges and the
// background workers under tp (default: no spans). The ledger's statements
// are traced by the store's own tracer (ledger.Options.Tracer).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp }
}

// New builds a server over store and the configured rail accounts (nil:
// none, so every payment call is refused). Nothing listens until Start.
func New(cfg config.Config, store *ledger.Store, rs *rails.Registry, log *slog.Logger, opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.LeaseOwner == "" {
		// Leases (attempts, reconciliation, webhook deliveries) need a
		// name unique to this process.
		host, _ := os.Hostname()
		cfg.LeaseOwner = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	m := metrics.New()
	store = observeLedger(store, rs, m)
	failQuota := quota.Options{Rate: cfg.AuthFailureRate, Burst: cfg.AuthFailureBurst}
	eng := engine.New(store, engine.Options{Rails: rs, LeaseOwner: cfg.LeaseOwner, LeaseTTL: cfg.LeaseTTL,
		ReconcileDelay: cfg.ReconcileDelay, RailSettle: cfg.RailSettle, Advisors: []gate.Advisor{gate.NewPayee{}},
		Failures: quota.NewFailures(failQuota, failQuota), ExtProcInPath: cfg.ExtProcInPath, MaxPendingApprovals: cfg.MaxPendingApprovals,
		RailReadRate: cfg.AgentRailReadRate, RailReadBurst: cfg.AgentRailReadBurst,
		DecisionRate: cfg.AgentDecisionRate, DecisionBurst: cfg.AgentDecisionBurst,
		Tracer: o.tracer, DecisionLog: cfg.DecisionLog}, log, m)
	rec := reconcile.New(store, rs, reconcile.Options{
		Owner: cfg.LeaseOwner, Delay: cfg.ReconcileDelay, MaxAttempts: cfg.ReconcileMaxAttempts, ClaimTTL: cfg.ReconcileClaimTTL,
		Tracer:  o.tracer,
		Metrics: reconcile.NewMetrics(m.Registry),
	}, log)

	// The owner API's VerifyAudit trusts --audit-verifier-key, else the
	// signing key's own verifier; with neither it refuses (a log re-sealed
	// with any key would pass).
	var auditSigner note.Signer
	var auditVerifier note.Verifier
	if cfg.AuditSigningKey != "" {
		var err error
		if auditSigner, auditVerifier, err = audit.LoadSigner(cfg.AuditSigningKey); err != nil {
			return nil, err
		}
	}
	if cfg.AuditVerifierKey != "" {
		var err error
		if auditVerifier, err = audit.LoadVerifier(cfg.AuditVerifierKey); err != nil {
			return nil, err
		}
	}

	validator, err := protovalidate.New()
	if err != nil {
		return nil, fmt.Errorf("protovalidate: %w", err)
	}
	authn, err := ownerauth.New(cfg.OwnerAuth(), store)
	if err != nil {
		return nil, fmt.Errorf("owner authentication: %w", err)
	}
	webhookNets, err := cfg.WebhookNetworks()
	if err != nil {
		return nil, fmt.Errorf("webhook-allow-networks: %w", err)
	}
	webhooks := outbox.AddressPolicy{Allow: webhookNets}
	proxies, err := cfg.TrustedProxyNetworks()
	if err != nil {
		return nil, fmt.Errorf("trusted-proxies: %w", err)
	}
	peers := quota.Peers{TrustedProxies: proxies}
	ownerQuota := quota.Options{Rate: cfg.OwnerQuotaRate, Burst: cfg.OwnerQuotaBurst}
	// One failure budget for the owner API and the console's sign-in: a
	// guesser gains nothing by alternating between them.
	ownerFailures := quota.NewFailures(failQuota, failQuota)
	guard := &ownerauth.Guard{Auth: authn, Peers: peers, Sources: quota.NewLimiter(ownerQuota), Owners: quota.NewLimiter(ownerQuota),
		Failures: ownerFailures, ToStatus: api.ToStatus,
		Methods: []string{countersignv1.DecisionService_Reconcile_FullMethodName}}
	// One set of services on two servers: gs on the API listener, which
	// the agent reaches, bounded in what an unknown caller makes it hold
	// (limits.go); gws on the REST gateway's in-process listener, whose one
	// connection carries every REST call and watch stream at once (the
	// HTTP listener bounds those).
	hs := health.NewServer()
	decisions := api.NewDecisionServer(eng, store, rec).WithPeers(peers).WithMaxBody(cfg.MaxRequestBytes)
	owners := api.NewOwnerServer(store, ownerauth.OwnerID).WithWebhookAddresses(webhooks).WithAuditVerifier(auditVerifier).WithRefundables(eng)
	apiServer := func(limits ...grpc.ServerOption) *grpc.Server {
		g := grpc.NewServer(append(limits, grpc.StatsHandler(grpcTracing(o.tracer)),
			grpc.ChainUnaryInterceptor(guard.Unary(), api.ValidationInterceptor(validator)),
			grpc.ChainStreamInterceptor(guard.Stream(), api.StreamValidationInterceptor(validator)))...)
		countersignv1.RegisterDecisionServiceServer(g, decisions)
		countersignv1.RegisterOwnerServiceServer(g, owners)
		// Watch bounded: anyone in the pod reaches this listener (limits.go).
		healthpb.RegisterHealthServer(g, apiHealth{HealthServer: hs})
		if cfg.GRPCReflection {
			reflection.Register(g)
		}
		return g
	}
	gs, gws := apiServer(apiLimits(cfg)...), apiServer(grpc.MaxRecvMsgSize(apiMaxMessage(cfg)), grpc.MaxHeaderListSize(httpMaxHeaderBytes))

	// The Envoy-facing server answers nothing else: an ALLOW carries the
	// rail key, so what can reach this listener is what can obtain it.
	envoyCreds, err := envoyCredentials(cfg)
	if err != nil {
		return nil, err
	}
	con, err := newConsole(cfg, authn, store, peers, ownerFailures, log)
	if err != nil {
		return nil, err
	}
	es := grpc.NewServer(grpc.StatsHandler(grpcTracing(o.tracer)), grpc.Creds(envoyCreds))
	authv3.RegisterAuthorizationServer(es, extauthz.NewServer(eng, cfg.MaxRequestBytes).WithTracing(o.tracer))
	extprocv3.RegisterExternalProcessorServer(es, extproc.NewServer(eng, log).WithTracing(o.tracer))
	healthpb.RegisterHealthServer(es, hs)

	s := &Server{
		cfg: cfg, log: log, metrics: m, tracer: o.tracer, grpc: gs, gateway: gws, envoy: es, errs: make(chan error, 3),
		store: store, rails: rs, reconciler: rec, auditSigner: auditSigner, webhooks: webhooks, peers: peers, console: con,
		ready: &readiness{
			prober: store, health: hs, metrics: m, log: log, now: time.Now,
			services: []string{"", authv3.Authorization_ServiceDesc.ServiceName,
				countersignv1.DecisionService_ServiceDesc.ServiceName,
				countersignv1.OwnerService_ServiceDesc.ServiceName},
		},
	}
	// Until the first probe answers, nobody is told the server is ready.
	s.ready.notYet()
	return s, nil
}

// Start binds both listeners and serves in the background.
func (s *Server) Start(ctx context.Context) error {
	var lc net.ListenConfig
	gl, err := listenGRPC(ctx, s.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("grpc-addr %s: %w", s.cfg.GRPCAddr, err)
	}
	el, err := listenGRPC(ctx, s.cfg.EnvoyAddr)
	if err != nil {
		gl.Close()
		return fmt.Errorf("envoy-addr %s: %w", s.cfg.EnvoyAddr, err)
	}
	hl, err := lc.Listen(ctx, "tcp", s.cfg.HTTPAddr)
	if err != nil {
		gl.Close()
		el.Close()
		return fmt.Errorf("http-addr %s: %w", s.cfg.HTTPAddr, err)
	}
	s.grpcLis, s.envoyLis, s.httpLis = gl, el, hl
	gl = newSlotListener(gl, apiMaxConns)
	if _, unix := config.UnixPath(s.cfg.EnvoyAddr); !unix && s.cfg.EnvoyTLSCert == "" {
		s.log.Warn("the Envoy listener is plain TCP (--"+config.UnsafeEnvoyTCPFlag+"): anything that can connect to it can obtain the rail keys",
			"envoy_addr", el.Addr().String())
	}

	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.gatewayLis = quota.NewGatewayListener()
	mux, err := s.httpMux(bg, s.gatewayLis)
	if err != nil {
		cancel()
		gl.Close()
		el.Close()
		hl.Close()
		_ = s.gatewayLis.Close()
		return err
	}
	hs := newSlotListener(hl, httpMaxConns)
	hl, s.httpSlots = hs, hs
	s.http = &http.Server{Handler: boundBodies(mux, apiMaxMessage(s.cfg)), ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes: httpMaxHeaderBytes, IdleTimeout: httpIdleTimeout, ConnState: hs.trackHTTP}

	if s.cfg.OutboxInterval > 0 {
		d := &outbox.Dispatcher{Store: s.store, Owner: s.cfg.LeaseOwner, Log: s.log, Metrics: outbox.NewMetrics(s.metrics.Registry),
			Addresses: s.webhooks, Tracer: s.tracer}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			d.Run(bg, s.cfg.OutboxInterval)
		}()
	}
	if s.auditSigner != nil {
		m := newSequencerMetrics(s.metrics.Registry)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			runSequencer(bg, s.store, s.auditSigner, s.cfg.AuditSealInterval, s.log, m)
		}()
	} else {
		s.log.Warn("audit sealing is off: no --audit-signing-key, so this process seals no audit records into the signed log " +
			"(records are still written; another process with the key, or `countersign audit seal`, may seal them)")
	}
	if s.cfg.PruneInterval > 0 {
		m := newPruneMetrics(s.metrics.Registry)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			runPruner(bg, s.store, s.cfg.PruneInterval, s.log, m)
		}()
	}
	if s.cfg.ReconcileInterval > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.reconciler.Run(bg, s.cfg.ReconcileInterval)
		}()
	}
	s.wg.Add(5)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(gl); err != nil {
			s.errs <- fmt.Errorf("grpc: %w", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		if err := s.gateway.Serve(s.gatewayLis); err != nil {
			s.errs <- fmt.Errorf("grpc (rest gateway): %w", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		if err := s.envoy.Serve(el); err != nil {
			s.errs <- fmt.Errorf("envoy listener: %w", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.errs <- fmt.Errorf("http: %w", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.ready.run(bg, s.cfg.ReadinessInterval)
	}()
	s.log.Info("serving", "grpc", gl.Addr().String(), "envoy", el.Addr().String(), "http", hl.Addr().String())
	return nil
}

// GRPCAddr is the bound gRPC address (useful with port 0), as a gRPC dial
// target.
func (s *Server) GRPCAddr() string { return dialTarget(s.grpcLis) }

// EnvoyAddr is the bound Envoy listener (ext_authz, ext_proc), as a gRPC
// dial target.
func (s *Server) EnvoyAddr() string { return dialTarget(s.envoyLis) }

// listenGRPC listens on host:port, or on a unix socket for "unix:/path".
// ALLOW answers carry the rail key to Envoy, so a deployment where the agent
// shares the network namespace (a sidecar in the agent's pod) must put the
// Envoy-facing listener on a socket in a volume only Envoy and Countersign
// mount: anything that can call Check can read what ALLOW sets.
func listenGRPC(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	path, ok := config.UnixPath(addr)
	if !ok {
		return lc.Listen(ctx, "tcp", addr)
	}
	// A stale socket from a killed process would block the bind.
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	// Owner and group only: Envoy's container runs in the group.
	if err := os.Chmod(path, 0o660); err != nil { //nolint:gosec // the Envoy container connects through the group
		ln.Close()
		return nil, err
	}
	return ln, nil
}

func dialTarget(l net.Listener) string {
	if l.Addr().Network() == "unix" {
		return "unix://" + l.Addr().String()
	}
	return l.Addr().String()
}

// HTTPAddr is the bound HTTP address.
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// Run starts the server and blocks until ctx ends or a listener fails, then
// shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-s.errs:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	return errors.Join(runErr, s.Shutdown(sctx))
}

// Shutdown stops accepting work, lets in-flight requests finish until ctx
// ends, then cuts what remains.
func (s *Server) Shutdown(ctx context.Context) error {
	s.log.Info("shutting down")
	for _, svc := range s.ready.services {
		s.ready.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	herr := s.http.Shutdown(ctx)
	for _, g := range []*grpc.Server{s.envoy, s.grpc, s.gateway} {
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			g.Stop()
			<-done
		}
	}
	s.cancel()
	s.wg.Wait()
	return herr
}

// httpMux serves REST through the gateway, which calls the gRPC server over
// gateway (in-process, never the gRPC listener: a call there could come from
// anyone, and what it says about its HTTP peer would be believed).
func (s *Server) httpMux(ctx context.Context, gateway *quota.GatewayListener) (*http.ServeMux, error) {
	gw := runtime.NewServeMux(runtime.WithOutgoingHeaderMatcher(quota.OutgoingHeaderMatcher),
		runtime.WithMetadata(s.peers.GatewayMetadata),
		// The gateway's default JSON reader drops members it does not know:
		// a mandate posted with `budget` for `budgets` was stored without
		// its budget (found by a review). A body with an unknown member is
		// refused, naming it; answers are written as by default.
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}}))
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(gateway.DialContext)}
	if err := countersignv1.RegisterOwnerServiceHandlerFromEndpoint(ctx, gw, "passthrough:///countersign-gateway", dial); err != nil {
		return nil, fmt.Errorf("rest gateway: %w", err)
	}
	mux := http.NewServeMux()
	// The console's session cookie reaches the API only through WrapAPI
	// (CSRF checks, cookie → bearer, the Cookie header removed).
	mux.Handle("/v1/", s.console.WrapAPI(gw))
	mux.Handle("/console", s.console.Handler())
	mux.Handle("/console/", s.console.Handler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		// At most one probe a second, shared by concurrent callers: anyone
		// reaching the port may ask (readiness.go).
		if err := s.ready.answer(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", notReadyReason(err))
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapi.JSON)
	})
	return mux, nil
}

// newConsole is the owner console over the owner authenticator: token
// sign-in always, OIDC sign-in with owner-client-id.
func newConsole(cfg config.Config, authn *ownerauth.Authenticator, store *ledger.Store, peers quota.Peers,
	failures *quota.Failures, log *slog.Logger,
) (*console.Console, error) {
	o := console.Options{Auth: authn, Store: store, TTL: cfg.ConsoleSessionTTL, Peers: peers, Failures: failures,
		URL: cfg.ConsoleURL, Log: log}
	if cfg.OwnerClientID != "" {
		secret, err := cfg.OwnerClientSecret()
		if err != nil {
			return nil, err
		}
		o.OIDC = &console.OIDC{ClientID: cfg.OwnerClientID, ClientSecret: secret,
			AuthURL: cfg.OwnerAuthorizationURL, TokenURL: cfg.OwnerTokenURL}
	}
	c, err := console.New(o)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return c, nil
}

// grpcTracing is the gRPC server span of each call, a root of
// Countersign's own trace: the trace context in the caller's metadata is
// only linked (telemetry.ServerHandler), whichever service is called. The
// agent reaches this listener, and the span starts before any credential
// is checked, so an owner's call is no more to be believed than the
// agent's. The engine's spans are its children. Envoy's ext_authz and
// ext_proc exchanges are not traced here: their own spans (extauthz,
// extproc) link the HTTP request they are about, and a second server span
// around each would only duplicate them. Health checks are not traced.
func grpcTracing(tp trace.TracerProvider) stats.Handler {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return telemetry.ServerHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(telemetry.NoPropagation()), otelgrpc.WithPublicEndpoint(),
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool {
			switch info.FullMethodName {
			case authv3.Authorization_Check_FullMethodName, extprocv3.ExternalProcessor_Process_FullMethodName,
				healthpb.Health_Check_FullMethodName, healthpb.Health_Watch_FullMethodName:
				return false
			}
			return true
		})))
}

// notReadyReason says why without echoing driver errors, which can name
// hosts and users.
func notReadyReason(err error) string {
	if errors.Is(err, ledger.ErrSchemaBehind) {
		return err.Error()
	}
	return "ledger unreachable"
}
