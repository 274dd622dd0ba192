package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/testing/freeport"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/pgproxy"
	"github.com/countersign/countersign/internal/testing/wait"
)

const (
	railAccount = "acct_bench"
	// allowAmount is refunded by every ALLOW; blockAmount exceeds the
	// mandates' per-action maximum (maxPerAction) and is BLOCKED by G3.
	allowAmount  = 1000
	blockAmount  = 200000
	maxPerAction = 150000
)

// rig is everything the benchmark starts: the binary, PostgreSQL, the mock
// rail and the files a server needs.
type rig struct {
	t         *testing.T
	dir       string // private temporary directory (binaries, sockets, files)
	bin       string // the countersign binary
	dbURL     string // the ledger database
	floorURL  string // pgbench's database
	pgVersion string
	pgAddr    string // host:port of PostgreSQL
	admin     *pgx.Conn
	dbOID     uint32
	mock      *mockrail.Server
	rails     string // the rails file
	token     string // owner token
	ownerID   string

	payMu   sync.Mutex
	nextPay int
}

// run runs the countersign binary with args and returns its output.
func (r *rig) run(args ...string) string {
	r.t.Helper()
	out, err := exec.Command(r.bin, args...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("countersign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// payments adds n payments of amount each to the mock rail and returns the
// first one's index; payment i is "pi_b<i>".
func (r *rig) payments(n int, amount int64) int {
	r.t.Helper()
	r.payMu.Lock()
	defer r.payMu.Unlock()
	first := r.nextPay
	for i := first; i < first+n; i++ {
		if _, err := r.mock.AddPayment(mockrail.Payment{Rail: mockrail.Stripe, ID: paymentID(i), Amount: amount, Currency: "usd"}); err != nil {
			r.t.Fatal(err)
		}
	}
	r.nextPay += n
	return first
}

func paymentID(i int) string { return "pi_b" + strconv.Itoa(i) }

func startMockRail(t *testing.T) (*mockrail.Server, string) {
	mock, err := mockrail.New()
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(mock)
	t.Cleanup(func() { mock.Close(); ts.Close() })
	return mock, ts.URL
}

// writeFile writes content to name in the rig's directory.
func (r *rig) writeFile(name, content string) string {
	r.t.Helper()
	p := filepath.Join(r.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// freeAddr is a loopback address nobody listens on, below the ephemeral
// range (internal/testing/freeport says why).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// tail keeps the last bytes a process wrote, for failure messages.
// logFile is where a serve writes its log: a file, as a deployed sidecar's
// stderr goes to the container runtime's log file. A pipe would make every
// log line (one per decision) wake a reader in this process, which shares
// the two cores with the load it generates, and time that, not Countersign.
type logFile struct {
	f *os.File
}

const tailBytes = 64 << 10

func newLogFile(t testing.TB, dir string) *logFile {
	f, err := os.CreateTemp(dir, "serve-*.log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return &logFile{f: f}
}

// String is the log's last tailBytes, for a failure message.
func (l *logFile) String() string {
	b, err := os.ReadFile(l.f.Name())
	if err != nil {
		return "(log unreadable: " + err.Error() + ")"
	}
	if len(b) > tailBytes {
		b = b[len(b)-tailBytes:]
	}
	return string(b)
}

// serveProc is a running `countersign serve`.
type serveProc struct {
	cmd            *exec.Cmd
	out            *logFile
	grpc, http     string // host:port
	envoy          string // gRPC target of the Envoy listener (unix socket)
	startedToReady time.Duration
	done           chan struct{}
	conns          []*grpc.ClientConn
	stopped        bool
	owner          countersignv1.OwnerServiceClient
	envoyConns     []*grpc.ClientConn
}

// serveOptions are what differs between the servers the benchmark starts.
type serveOptions struct {
	dbURL string
	// quiet turns off the periodic background work (reconciler, webhook
	// dispatcher, and readiness probes every minute instead of every
	// second), so that a count of the database's work is the decisions'.
	quiet bool
}

// serve starts `countersign serve` and returns once gRPC health says
// SERVING; the time from exec to that answer is startedToReady.
func (r *rig) serve(o serveOptions) *serveProc {
	t := r.t
	t.Helper()
	sockDir, err := os.MkdirTemp(r.dir, "sock-")
	if err != nil {
		t.Fatal(err)
	}
	p := &serveProc{out: newLogFile(t, r.dir), grpc: freeAddr(t), http: freeAddr(t), done: make(chan struct{})}
	sock := filepath.Join(sockDir, "envoy.sock")
	p.envoy = "unix://" + sock
	env := []string{
		"COUNTERSIGN_DATABASE_URL=" + o.dbURL,
		"COUNTERSIGN_GRPC_ADDR=" + p.grpc,
		"COUNTERSIGN_HTTP_ADDR=" + p.http,
		"COUNTERSIGN_ENVOY_ADDR=unix:" + sock,
		"COUNTERSIGN_RAILS_FILE=" + r.rails,
		// Setup creates a few dozen agents, credentials and mandates.
		"COUNTERSIGN_OWNER_QUOTA_RATE=10000",
		"COUNTERSIGN_OWNER_QUOTA_BURST=10000",
		// The hot cells send hundreds of new refunds a second from one
		// agent, each a rail read: the per-agent limits on rail reads and
		// on decisions (default 20 a second each) would refuse most of them.
		"COUNTERSIGN_AGENT_RAIL_READ_RATE=0",
		"COUNTERSIGN_AGENT_DECISION_RATE=0",
	}
	if o.quiet {
		env = append(env, "COUNTERSIGN_RECONCILE_INTERVAL=0s", "COUNTERSIGN_OUTBOX_INTERVAL=0s", "COUNTERSIGN_READINESS_INTERVAL=1m")
	}
	p.cmd = exec.Command(r.bin, "serve")
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out.f, p.out.f

	// gRPC health over a connection that retries every few milliseconds
	// while the process comes up (the default backoff starts at a second).
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 2 * time.Millisecond, Multiplier: 1.2, MaxDelay: 10 * time.Millisecond},
			MinConnectTimeout: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop() })
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("health watch: %v\n%s", err, p.out.String())
	}
	for {
		m, err := watch.Recv()
		if err != nil {
			t.Fatalf("countersign serve did not become ready: %v\n%s", err, p.out.String())
		}
		if m.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
	p.startedToReady = time.Since(start)
	cancel()
	p.conns = append(p.conns, conn)
	// /readyz agrees.
	resp, err := http.Get("http://" + p.http + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz answered %d after gRPC health said SERVING", resp.StatusCode)
	}
	p.owner = countersignv1.NewOwnerServiceClient(conn)
	// Envoy keeps a few HTTP/2 connections to its ext_authz/ext_proc
	// cluster (one per worker); two, as on a 2-core pod.
	for range 2 {
		c, err := grpc.NewClient(p.envoy, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		p.envoyConns = append(p.envoyConns, c)
		p.conns = append(p.conns, c)
	}
	return p
}

// stop ends the process with SIGTERM (SIGKILL after 30 s) and waits.
func (p *serveProc) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// rss is the process's VmRSS in bytes.
func (p *serveProc) rss() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("bench: no VmRSS for pid %d", p.cmd.Process.Pid)
}

// ownerCtx carries the owner token.
func (r *rig) ownerCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+r.token), cancel
}

// agent is one agent with its execute credential.
type agent struct {
	id, secret string
}

// newAgent creates an agent, an execute credential and a budgeted mandate
// with a total budget and a sliding window (calls and amount), through the
// owner API as an owner would.
func (r *rig) newAgent(p *serveProc, name string) agent {
	t := r.t
	t.Helper()
	ctx, cancel := r.ownerCtx()
	defer cancel()
	a, err := p.owner.CreateAgent(ctx, &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: name}})
	if err != nil {
		t.Fatal(err)
	}
	id := a.GetAgent().GetAgentId()
	c, err := p.owner.IssueCredential(ctx, &countersignv1.IssueCredentialRequest{AgentId: id,
		Scope: countersignv1.CredentialScope_CREDENTIAL_SCOPE_EXECUTE, ExpireTime: timestamppb.New(time.Now().Add(24 * time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	usd := func(n int64) *countersignv1.Money { return &countersignv1.Money{AmountMinor: n, Currency: "USD"} }
	if _, err := p.owner.CreateMandate(ctx, &countersignv1.CreateMandateRequest{Mandate: &countersignv1.Mandate{
		Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: railAccount, AgentId: id, Purpose: "refunds for the benchmark",
		ValidFrom: timestamppb.New(now.Add(-time.Hour)), ValidUntil: timestamppb.New(now.Add(24 * time.Hour)),
		Mode: countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND,
			MinAmountMinor: 1, MaxAmountMinor: maxPerAction, Currencies: []string{"USD"}}},
		// Large enough that nothing in the run is refused for budget or
		// window, yet every ALLOW holds budget and counts in the window.
		Budgets: []*countersignv1.Money{usd(1 << 40)},
		Windows: []*countersignv1.Window{{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT, Duration: durationpb.New(time.Hour),
			MaxCalls: 1 << 30, MaxAmount: usd(1 << 40)}},
	}}); err != nil {
		t.Fatal(err)
	}
	return agent{id: id, secret: c.GetSecret()}
}

// countIntents pages through the owner API's intents in state.
func (r *rig) countIntents(p *serveProc, state countersignv1.IntentState) int {
	t := r.t
	t.Helper()
	ctx, cancel := r.ownerCtx()
	defer cancel()
	n, token := 0, ""
	for {
		resp, err := p.owner.ListIntents(ctx, &countersignv1.ListIntentsRequest{PageSize: 1000, PageToken: token, State: state, RailAccount: railAccount})
		if err != nil {
			t.Fatal(err)
		}
		n += len(resp.GetIntents())
		if token = resp.GetNextPageToken(); token == "" {
			return n
		}
	}
}

// dbSnap is what PostgreSQL says about the ledger database at one moment.
type dbSnap struct {
	lsn        uint64
	nextXID    int64 // the first transaction id not yet assigned
	statements map[stmtKey]stmtStat
}

type stmtKey struct {
	queryID  int64
	toplevel bool
}

type stmtStat struct{ calls, walRecords int64 }

// dbWork is the database's work between two snapshots.
type dbWork struct {
	topLevel, nested int64 // statements as pg_stat_statements counts them (track=all)
	writing          int64 // top-level statements that wrote WAL
	walBytes         int64
	// writingTx counts transaction ids assigned: PostgreSQL gives one
	// only to a transaction (or subtransaction) that writes.
	writingTx int64
}

func (w dbWork) add(o dbWork) dbWork {
	return dbWork{w.topLevel + o.topLevel, w.nested + o.nested, w.writing + o.writing, w.walBytes + o.walBytes, w.writingTx + o.writingTx}
}

func (r *rig) snap() dbSnap {
	t := r.t
	t.Helper()
	ctx := context.Background()
	s := dbSnap{statements: map[stmtKey]stmtStat{}}
	rows, err := r.admin.Query(ctx, `SELECT queryid, toplevel, calls, wal_records FROM pg_stat_statements WHERE dbid = $1`, r.dbOID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k stmtKey
		var v stmtStat
		if err := rows.Scan(&k.queryID, &k.toplevel, &v.calls, &v.walRecords); err != nil {
			t.Fatal(err)
		}
		s.statements[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var lsn string
	// Neither reading assigns a transaction id or writes WAL.
	if err := r.admin.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&lsn, &s.nextXID); err != nil {
		t.Fatal(err)
	}
	if s.lsn, err = parseLSN(lsn); err != nil {
		t.Fatal(err)
	}
	return s
}

// since is the work done from before to s.
func (s dbSnap) since(before dbSnap) dbWork {
	w := dbWork{walBytes: int64(s.lsn - before.lsn), writingTx: s.nextXID - before.nextXID}
	for k, v := range s.statements {
		b := before.statements[k]
		calls := v.calls - b.calls
		if k.toplevel {
			w.topLevel += calls
			if v.walRecords > b.walRecords {
				w.writing += calls
			}
		} else {
			w.nested += calls
		}
	}
	return w
}

// xacts is pg_stat_database's count of the ledger database's commits and
// rollbacks. Backends report it when idle for a while or when they exit,
// so it is read only after every session of the database has ended.
func (r *rig) xacts() (commits, rollbacks int64) {
	t := r.t
	t.Helper()
	ctx := context.Background()
	var sessions int
	if !wait.Until(30*time.Second, func() bool {
		err := r.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datid = $1`, r.dbOID).Scan(&sessions)
		return err == nil && sessions == 0
	}) {
		t.Fatalf("%d sessions still on the ledger database", sessions)
	}
	if _, err := r.admin.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		t.Fatal(err)
	}
	if err := r.admin.QueryRow(ctx, `SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datid = $1`, r.dbOID).Scan(&commits, &rollbacks); err != nil {
		t.Fatal(err)
	}
	return commits, rollbacks
}

// proxy starts a counting proxy in front of PostgreSQL and returns it with
// the ledger URL through it.
func (r *rig) proxy() (*pgproxy.Proxy, string) {
	r.t.Helper()
	px, err := pgproxy.Start(context.Background(), r.pgAddr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = px.Close() })
	return px, strings.Replace(r.dbURL, r.pgAddr, px.Addr(), 1)
}

// machine describes the hardware and software the run measured.
func machine(pgVersion string) string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.Join(strings.Fields(v), " ")
				break
			}
		}
	}
	mem := "unknown memory"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				if err == nil {
					mem = fmt.Sprintf("%.1f GiB memory", float64(kb)/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s; %s; PostgreSQL %s", cpu, numCPU(), mem, goVersion(), pgVersion)
}

// loadAverage is the machine's one-minute load average ("" if unknown):
// work other than the run's shares the cores too.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}
