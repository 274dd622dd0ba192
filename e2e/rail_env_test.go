package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/envoystandin"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// The rail accounts every environment configures, with mockrail's default keys.
const (
	stripeAccount   = "acct_e2e_stripe"
	razorpayAccount = "acct_e2e_rzp"
	stripeKey       = "sk_test_mockrail"
	razorpayKey     = "rzp_test_mockrail:mockrail_secret"
)

// railEnv is a whole deployment: PostgreSQL, mockrail, countersign serve and
// the Envoy-contract egress proxy in front of them, plus an agent credential.
type railEnv struct {
	t          *testing.T
	dbURL      string
	store      *ledger.Store
	mock       string // mockrail base URL
	proxy      string // egress proxy base URL (what the agent's SDK points at)
	grpcAddr   string
	envoyAddr  string // the Envoy listener (ext_authz, ext_proc): a Unix socket
	secret     string // the agent's Countersign credential
	agentID    string
	countersig *proc
	csEnv      []string
	httpAddr   string
	railsFile  string
	proxyCfg   envoystandin.Config
	// auditPub is the verifier key of the audit signing key serve seals with.
	auditPub string
}

// secondCountersign starts another countersign process on the same ledger
// (its own addresses and lease owner) with its own egress proxy, and
// returns that proxy's base URL.
func (e *railEnv) secondCountersign() string {
	e.t.Helper()
	grpcAddr, httpAddr, envoyAddr := freeAddr(e.t), freeAddr(e.t), envoySocket(e.t)
	env := append([]string{}, e.csEnv...)
	env = append(env, "COUNTERSIGN_GRPC_ADDR="+grpcAddr, "COUNTERSIGN_HTTP_ADDR="+httpAddr, "COUNTERSIGN_ENVOY_ADDR="+envoyAddr,
		"COUNTERSIGN_LEASE_OWNER=second")
	startProc(e.t, "countersign", env, "serve")
	waitStatus(e.t, "http://"+httpAddr+"/readyz", 200, 30*time.Second)
	cfg := e.proxyCfg
	cfg.ExtAuthz, cfg.ExtProc = envoyAddr, envoyAddr
	ctx, cancel := context.WithCancel(context.Background())
	p, err := envoystandin.Start(ctx, cfg)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { p.Close(); cancel() })
	return "http://" + p.Addr()
}

// restartCountersign SIGKILLs the running countersign (no graceful
// anything) and starts a new one on the same ledger and addresses.
func (e *railEnv) restartCountersign() {
	e.t.Helper()
	// It may already be dead (a chaos kill point).
	_ = e.countersig.cmd.Process.Kill()
	_ = e.countersig.cmd.Wait()
	e.countersig = startProc(e.t, "countersign", e.csEnv, "serve")
	waitStatus(e.t, "http://"+e.httpAddr+"/readyz", 200, 30*time.Second)
}

type envOptions struct {
	reconcileDelay time.Duration
	leaseTTL       time.Duration
	// claimTTL is the reconcile claim TTL (the product's default when 0).
	claimTTL     time.Duration
	routeTimeout time.Duration
	mockFaults   []string // --fault flags for mockrail
	// noReconciler turns serve's in-process reconciler off.
	noReconciler bool
	// noMandate leaves the agent without a mandate (tests add their own).
	noMandate bool
	// noDispatcher turns serve's webhook dispatcher off (tests run their own).
	noDispatcher bool
	// dbURLRewrite, when set, changes the database URL countersign serve
	// uses (e.g. through a proxy the test controls); the test's own store
	// keeps the direct one.
	dbURLRewrite func(string) string
	// serveEnv is appended to every countersign serve's environment.
	serveEnv []string
	// cluster, when set, receives a private PostgreSQL cluster the
	// environment runs on (so the test can kill it).
	cluster **pgtest.Cluster
	// chaosKill, when set, starts the chaos build of countersign armed to
	// SIGKILL itself at that kill point.
	chaosKill string
	// mcpUpstream, when set, is a payment MCP server (Stripe preset, with a
	// metadata argument) reachable through the proxy as host mcp.local,
	// guarded as rail account acct_e2e_mcp.
	mcpUpstream string
	// mcpNoMetadata configures the MCP account's tools without a metadata
	// argument: no place for the body stamp.
	mcpNoMetadata bool
}

const mcpAccount = "acct_e2e_mcp"

// unlimitedRailReads and unlimitedDecisions, in envOptions.serveEnv, turn
// off the per-agent limits on rail reads and on decisions (on by default)
// for a test whose one agent sends hundreds of new requests at once to race
// on something else; the limits themselves are internal/engine's and
// internal/server's to test.
const (
	unlimitedRailReads = "COUNTERSIGN_AGENT_RAIL_READ_RATE=0"
	unlimitedDecisions = "COUNTERSIGN_AGENT_DECISION_RATE=0"
)

func newRailEnv(t *testing.T, o envOptions) *railEnv {
	t.Helper()
	ctx := context.Background()
	if o.reconcileDelay == 0 {
		o.reconcileDelay = 500 * time.Millisecond
	}
	if o.leaseTTL == 0 {
		o.leaseTTL = 10 * time.Second
	}
	if o.routeTimeout == 0 {
		o.routeTimeout = 3 * time.Second
	}
	var dbURL string
	if o.cluster != nil {
		// A private cluster the test may kill and restart.
		*o.cluster = pgtest.NewCluster(t)
		if err := (*o.cluster).CreateDatabase(ctx, "countersign", ""); err != nil {
			t.Fatal(err)
		}
		dbURL = (*o.cluster).URL("countersign")
		if _, err := ledger.Migrate(ctx, dbURL, nil); err != nil {
			t.Fatal(err)
		}
	} else {
		dbURL = pgtest.NewDatabase(t)
	}
	store, err := ledger.Open(ctx, dbURL, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)

	// mockrail on a free port.
	mockArgs := []string{"--listen", freeAddr(t)}
	for _, f := range o.mockFaults {
		mockArgs = append(mockArgs, "--fault", f)
	}
	mock := startProc(t, "mockrail", nil, mockArgs...)
	mockURL := waitListening(t, mock, "mockrail listening on ")

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	railsFile := write("rails.yaml", fmt.Sprintf(`rails:
  - account: %s
    rail: stripe
    hosts: [api.stripe.com]
    base_url: %s
    key_file: %s
  - account: %s
    rail: razorpay
    hosts: [api.razorpay.com]
    base_url: %s
    key_file: %s
`, stripeAccount, mockURL, write("stripe.key", stripeKey), razorpayAccount, mockURL, write("razorpay.key", razorpayKey))+
		fmt.Sprintf(`  - account: %s
    rail: stripe
    hosts: [mcp.stripe.local]
    base_url: %s
    key_file: %s
    mcp: {preset: stripe%s}
`, mcpAccount, mockURL, write("mcp.key", stripeKey), map[bool]string{false: ", metadata: metadata", true: ""}[o.mcpNoMetadata]))

	auditKey, auditPub, _, err := audit.WriteKeyPair(dir, "e2e.audit")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr, envoyAddr := freeAddr(t), freeAddr(t), envoySocket(t)
	serveURL := dbURL
	if o.dbURLRewrite != nil {
		serveURL = o.dbURLRewrite(dbURL)
	}
	csEnv := []string{
		"COUNTERSIGN_DATABASE_URL=" + serveURL,
		"COUNTERSIGN_GRPC_ADDR=" + grpcAddr,
		"COUNTERSIGN_ENVOY_ADDR=" + envoyAddr,
		"COUNTERSIGN_HTTP_ADDR=" + httpAddr,
		"COUNTERSIGN_RAILS_FILE=" + railsFile,
		"COUNTERSIGN_RECONCILE_DELAY=" + o.reconcileDelay.String(),
		// The mock rail applies a request before it answers or stalls, so
		// nothing of it is left at the rail once the stand-in's route gave
		// up: the route's timeout is its settle time.
		"COUNTERSIGN_RAIL_SETTLE_TIME=" + o.routeTimeout.String(),
		"COUNTERSIGN_RECONCILE_INTERVAL=" + map[bool]string{false: "200ms", true: "0s"}[o.noReconciler],
		"COUNTERSIGN_LEASE_TTL=" + o.leaseTTL.String(),
		"COUNTERSIGN_RECONCILE_CLAIM_TTL=" + cmp.Or(o.claimTTL, config.Defaults().ReconcileClaimTTL).String(),
		"COUNTERSIGN_LOG_LEVEL=debug",
		"COUNTERSIGN_OUTBOX_INTERVAL=" + map[bool]string{false: "500ms", true: "0s"}[o.noDispatcher],
		"COUNTERSIGN_AUDIT_SIGNING_KEY=" + auditKey,
		"COUNTERSIGN_AUDIT_SEAL_INTERVAL=200ms",
	}
	csEnv = append(csEnv, o.serveEnv...)
	binary, firstEnv := "countersign", csEnv
	if o.chaosKill != "" {
		binary, firstEnv = "countersign-chaos", append(append([]string{}, csEnv...), "COUNTERSIGN_CHAOS_KILL="+o.chaosKill)
	}
	cs := startProc(t, binary, firstEnv, "serve")
	waitStatus(t, "http://"+httpAddr+"/readyz", 200, 30*time.Second)

	pctx, cancel := context.WithCancel(ctx)
	pcfg := envoystandin.Config{
		Listen: "127.0.0.1:0", ExtAuthz: envoyAddr, ExtProc: envoyAddr,
		MaxRequestBytes: 64 << 10, AllowPartialMessage: true, StatusOnError: 503,
		Timeout: 10 * time.Second, ExtProcMessageTimeout: 10 * time.Second,
		Routes: []envoystandin.Route{
			{Prefix: "stripe.local", Upstream: mockURL, HostRewrite: "api.stripe.com",
				ContextExtensions: map[string]string{"rail_account": stripeAccount}, Timeout: o.routeTimeout},
			{Prefix: "razorpay.local", Upstream: mockURL, HostRewrite: "api.razorpay.com",
				ContextExtensions: map[string]string{"rail_account": razorpayAccount}, Timeout: o.routeTimeout},
		},
	}
	if o.mcpUpstream != "" {
		pcfg.Routes = append(pcfg.Routes, envoystandin.Route{Prefix: "mcp.local", Upstream: o.mcpUpstream, HostRewrite: "mcp.stripe.local",
			ContextExtensions: map[string]string{"rail_account": mcpAccount}, Timeout: o.routeTimeout})
	}
	proxy, err := envoystandin.Start(pctx, pcfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close(); cancel() })

	agent, err := store.CreateAgent(ctx, "own_e2e", "refund-bot")
	if err != nil {
		t.Fatal(err)
	}
	secret, hash, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.IssueCredential(ctx, agent.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash); err != nil {
		t.Fatal(err)
	}
	if !o.noMandate {
		applyMandate(t, store, generousMandate(agent.ID, stripeAccount, countersignv1.Rail_RAIL_STRIPE, "USD"))
		applyMandate(t, store, generousMandate(agent.ID, razorpayAccount, countersignv1.Rail_RAIL_RAZORPAY, "INR"))
		applyMandate(t, store, generousMandate(agent.ID, mcpAccount, countersignv1.Rail_RAIL_STRIPE, "USD"))
	}
	return &railEnv{t: t, dbURL: dbURL, store: store, agentID: agent.ID, mock: mockURL, proxy: "http://" + proxy.Addr(), grpcAddr: grpcAddr, envoyAddr: envoyAddr, secret: secret, countersig: cs, csEnv: csEnv, httpAddr: httpAddr, railsFile: railsFile, proxyCfg: pcfg, auditPub: auditPub}
}

// waitListening reads a process's output until a line with prefix names its URL.
func waitListening(t *testing.T, p *proc, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(p.out.String()))
		for sc.Scan() {
			if i := strings.Index(sc.Text(), prefix); i >= 0 {
				return strings.TrimSpace(sc.Text()[i+len(prefix):])
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %q line in output:\n%s", prefix, p.out.String())
	return ""
}

// mockPost calls a mockrail control endpoint.
func (e *railEnv) mockPost(path string, body any) {
	e.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(e.mock+path, "application/json", bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		out, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("mockrail %s: %d %s", path, resp.StatusCode, out)
	}
}

func (e *railEnv) payment(rail, id string, amount int64, currency string) {
	e.mockPost("/_mock/payments", map[string]any{"rail": rail, "id": id, "amount": amount, "currency": currency})
}

func (e *railEnv) fault(rule map[string]any) { e.mockPost("/_mock/fault", rule) }

// journal is mockrail's record of what really happened.
type journal struct {
	Effects []struct {
		EntityID       string            `json:"entity_id"`
		IdempotencyKey string            `json:"idempotency_key"`
		Subject        string            `json:"subject"`
		Amount         int64             `json:"amount"`
		Metadata       map[string]string `json:"metadata"`
	} `json:"effects"`
	Requests []journalRequest `json:"requests"`
}

// journalRequest is one rail request as mockrail journaled it (when it
// answered it).
type journalRequest struct {
	Time    time.Time `json:"time"`
	Method  string    `json:"method"`
	Path    string    `json:"path"`
	Query   string    `json:"query"`
	Status  int       `json:"status"`
	Outcome string    `json:"outcome"`
}

func (e *railEnv) journal() journal {
	e.t.Helper()
	resp, err := http.Get(e.mock + "/_mock/journal")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var j journal
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		e.t.Fatal(err)
	}
	return j
}

// effectsOn counts the rail effects on subject.
func (j journal) effectsOn(subject string) int {
	n := 0
	for _, f := range j.Effects {
		if f.Subject == subject {
			n++
		}
	}
	return n
}

// agentResponse is what the agent's SDK received.
type agentResponse struct {
	Status int
	Body   string
	Header http.Header
}

// stripeRefund sends a Stripe refund the way the Stripe SDK would, through
// the egress proxy, with the agent's credential where the SDK puts its key.
func (e *railEnv) stripeRefund(client *http.Client, form url.Values) agentResponse {
	e.t.Helper()
	return e.stripeRefundVia(e.proxy, client, form)
}

// stripeRefundVia sends the refund through the egress proxy at base.
func (e *railEnv) stripeRefundVia(base string, client *http.Client, form url.Values) agentResponse {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/refunds", strings.NewReader(form.Encode()))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Host = "stripe.local"
	req.Header.Set("Authorization", "Bearer "+e.secret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	// The Stripe SDK adds a random key to every POST; it proves nothing.
	req.Header.Set("Idempotency-Key", fmt.Sprintf("sdk-%d", time.Now().UnixNano()))
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		e.t.Fatalf("agent request: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return agentResponse{Status: resp.StatusCode, Body: string(b), Header: resp.Header}
}

// intents lists the ledger's intents on subject.
func (e *railEnv) intentsOn(subject string) []ledger.Intent {
	e.t.Helper()
	its, err := e.store.IntentsBySubject(context.Background(), subject)
	if err != nil {
		e.t.Fatal(err)
	}
	return its
}

// settle waits until every intent on subject is out of the ambiguous states.
func (e *railEnv) settle(subject string, within time.Duration) []ledger.Intent {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		its := e.intentsOn(subject)
		done := len(its) > 0
		for _, it := range its {
			switch it.State {
			case intent.InFlight, intent.Unknown, intent.Reconciling:
				done = false
			}
		}
		if done {
			return its
		}
		if time.Now().After(deadline) {
			var states []string
			for _, it := range its {
				fs, _ := e.store.FindingsFor(context.Background(), it.Key)
				states = append(states, fmt.Sprintf("%s %s (%s) findings %+v", it.SIK, it.State, it.Reason, fs))
			}
			e.t.Fatalf("intents on %s did not settle within %s: %v\ncountersign output:\n%s", subject, within, states, e.countersig.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
