package attack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/testing/envoystandin"
	"github.com/countersign/countersign/internal/testing/freeport"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// The Countersign rail accounts of the gated stack, both on the mock rail's
// default accounts.
const (
	stripeAccount   = "acct_attack_stripe"
	razorpayAccount = "acct_attack_razorpay"
	// mcpAccount is the Stripe account behind the payment MCP server.
	mcpAccount = "acct_attack_mcp"
)

// Stack is one mode's running processes: the mock rail (the cmd/mockrail
// binary), a payment MCP server in front of it (in this process) and,
// gated, PostgreSQL, `countersign serve` and one Envoy-contract proxy
// (internal/testing/envoystandin, in this process) per rail account.
type Stack struct {
	Mode    string // direct or gated
	RailURL string // the mock rail, http://host:port
	// Egress is the base URL an agent's SDK is configured with, per rail:
	// the rail itself direct, the proxy gated.
	Egress          map[string]string
	CountersignHTTP string // gated: Countersign's HTTP listener

	owner      countersignv1.OwnerServiceClient
	ownerToken string
	conn       *grpc.ClientConn
	proxies    []*envoystandin.Proxy
	mcp        *http.Server
	mcpURL     string
	procs      []*exec.Cmd
	cluster    *pgtest.Cluster
	dir        string
	logs       []*os.File
	client     *http.Client
	mu         sync.Mutex
}

// Binaries are the built countersign and mockrail binaries.
type Binaries struct{ Countersign, Mockrail string }

// StartStack starts the processes of mode.
func StartStack(ctx context.Context, mode string, bins Binaries) (_ *Stack, err error) {
	dir, err := os.MkdirTemp("", "cs-attack-"+mode+"-")
	if err != nil {
		return nil, err
	}
	s := &Stack{Mode: mode, dir: dir, client: &http.Client{Timeout: 15 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.RailURL, err = s.startMockrail(bins.Mockrail); err != nil {
		return nil, err
	}
	if err := s.startMCP(); err != nil {
		return nil, err
	}
	if mode == "direct" {
		s.Egress = map[string]string{"stripe": s.RailURL, "razorpay": s.RailURL, "mcp": s.mcpURL}
		return s, nil
	}
	if mode != "gated" {
		return nil, fmt.Errorf("attack: mode %q", mode)
	}
	return s, s.startGated(ctx, bins.Countersign)
}

func (s *Stack) logFile(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err == nil {
		s.logs = append(s.logs, f)
	}
	return f, err
}

// Logs is the tail of every process's log, for a failure message.
func (s *Stack) Logs() string {
	var b strings.Builder
	for _, f := range s.logs {
		data, _ := os.ReadFile(f.Name())
		if len(data) > 8<<10 {
			data = data[len(data)-8<<10:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(f.Name()), data)
	}
	return b.String()
}

func (s *Stack) startMockrail(bin string) (string, error) {
	// The process lives as long as the stack: Close stops it, not a context.
	log, err := s.logFile("mockrail")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(context.Background(), bin, "--listen", "127.0.0.1:0", "--log-level", "warn")
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	s.procs = append(s.procs, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("mockrail: %w", err)
	}
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "mockrail listening on ")
	if !ok {
		return "", fmt.Errorf("mockrail printed %q", line)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return url, nil
}

func (s *Stack) startMCP() error {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.mcp = &http.Server{Handler: newMCPServer(s.RailURL), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.mcp.Serve(ln) }()
	s.mcpURL = "http://" + ln.Addr().String()
	return nil
}

func (s *Stack) startGated(ctx context.Context, bin string) error {
	cl, err := pgtest.StartCluster(ctx, pgtest.ClusterOptions{})
	if err != nil {
		return err
	}
	s.cluster = cl
	if err := cl.CreateDatabase(ctx, "countersign", ""); err != nil {
		return err
	}
	db := cl.URL("countersign")
	run := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("countersign %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	if _, err := run("migrate", "--database-url", db); err != nil {
		return err
	}
	boot, err := run("owner", "bootstrap", "--name", "attack", "--database-url", db)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(boot), "\n")
	f := strings.Fields(lines[0])
	if len(f) < 2 || f[0] != "owner" {
		return fmt.Errorf("owner bootstrap printed %q", boot)
	}
	s.ownerToken = lines[len(lines)-1]
	for _, acct := range []string{stripeAccount, razorpayAccount, mcpAccount} {
		if _, err := run("owner", "grant-account", acct, f[1], "--database-url", db); err != nil {
			return err
		}
	}
	write := func(name, content string) (string, error) {
		p := filepath.Join(s.dir, name)
		return p, os.WriteFile(p, []byte(content), 0o600)
	}
	sk, err := write("stripe.key", mockrail.DefaultStripeKey)
	if err != nil {
		return err
	}
	rk, err := write("razorpay.key", mockrail.DefaultRazorpayKeyID+":"+mockrail.DefaultRazorpayKeySecret)
	if err != nil {
		return err
	}
	railsFile, err := write("rails.yaml", fmt.Sprintf(`rails:
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
  - account: %s
    rail: stripe
    hosts: [mcp.stripe.local]
    base_url: %s
    key_file: %s
    mcp: {preset: stripe, metadata: metadata, base_url: %s}
`, stripeAccount, s.RailURL, sk, razorpayAccount, s.RailURL, rk, mcpAccount, s.RailURL, sk, s.mcpURL))
	if err != nil {
		return err
	}
	grpcAddr, httpAddr := freeAddr(), freeAddr()
	sock := filepath.Join(s.dir, "envoy.sock")
	log, err := s.logFile("countersign")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(context.WithoutCancel(ctx), bin, "serve") // lives as long as the stack
	cmd.Env = append(os.Environ(),
		"COUNTERSIGN_DATABASE_URL="+db,
		"COUNTERSIGN_GRPC_ADDR="+grpcAddr,
		"COUNTERSIGN_HTTP_ADDR="+httpAddr,
		"COUNTERSIGN_ENVOY_ADDR=unix:"+sock,
		"COUNTERSIGN_RAILS_FILE="+railsFile,
		// Setup creates an agent, a credential and a mandate per run.
		"COUNTERSIGN_OWNER_QUOTA_RATE=100000",
		"COUNTERSIGN_OWNER_QUOTA_BURST=100000",
		// The scenarios measure the money gates: a retrying agent resends
		// a flood of held or refused requests (each a rail read) within a
		// second, past the per-agent limits on rail reads and on decisions,
		// which would then answer for the gates. Those limits are tested on
		// their own.
		"COUNTERSIGN_AGENT_RAIL_READ_RATE=0",
		"COUNTERSIGN_AGENT_DECISION_RATE=0",
	)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return err
	}
	s.procs = append(s.procs, cmd)
	s.CountersignHTTP = "http://" + httpAddr
	if !wait.Until(60*time.Second, func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.CountersignHTTP+"/readyz", nil)
		if err != nil {
			return false
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		return fmt.Errorf("countersign serve not ready within 60s\n%s", s.Logs())
	}
	if s.conn, err = grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return err
	}
	s.owner = countersignv1.NewOwnerServiceClient(s.conn)
	s.Egress = map[string]string{}
	for _, r := range []struct{ rail, account, host, upstream string }{
		{"stripe", stripeAccount, "api.stripe.com", s.RailURL}, {"razorpay", razorpayAccount, "api.razorpay.com", s.RailURL},
		{"mcp", mcpAccount, "mcp.stripe.local", s.mcpURL},
	} {
		// What the demo's egress and envoy/egress.yaml configure: the
		// whole body to ext_authz (bounded, partial allowed so that a
		// truncated body is judged), ext_proc on both directions.
		// The proxy lives as long as the stack, not the start-up context.
		p, err := envoystandin.Start(context.WithoutCancel(ctx), envoystandin.Config{
			ExtAuthz: "unix:" + sock, ExtProc: "unix:" + sock, MaxRequestBytes: 64 << 10, AllowPartialMessage: true,
			PackAsBytes: true, StatusOnError: 503, Timeout: 5 * time.Second, ExtProcMessageTimeout: 5 * time.Second,
			Routes: []envoystandin.Route{{Prefix: "*", Upstream: r.upstream, HostRewrite: r.host, Timeout: 10 * time.Second,
				ContextExtensions: map[string]string{"rail_account": r.account, "rail_host": r.host}}},
		})
		if err != nil {
			return fmt.Errorf("%s egress: %w", r.rail, err)
		}
		s.proxies = append(s.proxies, p)
		s.Egress[r.rail] = "http://" + p.Addr()
	}
	return nil
}

// Close stops everything the stack started.
func (s *Stack) Close() {
	for _, p := range s.proxies {
		p.Close()
	}
	if s.conn != nil {
		_ = s.conn.Close()
	}
	if s.mcp != nil {
		_ = s.mcp.Close()
	}
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	if s.cluster != nil {
		_ = s.cluster.Close()
	}
	for _, f := range s.logs {
		_ = f.Close()
	}
	_ = os.RemoveAll(s.dir)
}

// freeAddr is a loopback address nobody listens on, below the ephemeral
// range (internal/testing/freeport says why); the process started on it
// fails to start, and says so, if it was taken meanwhile.
func freeAddr() string {
	addr, err := freeport.Addr()
	if err != nil {
		return "127.0.0.1:0"
	}
	return addr
}

func (s *Stack) ownerCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.ownerToken)
}

// control calls the mock rail's control API.
func (s *Stack) control(ctx context.Context, method, path string, body any, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.RailURL+path, r)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("mock rail %s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Journal is the mock rail's journal.
func (s *Stack) Journal(ctx context.Context) (mockrail.Journal, error) {
	var j mockrail.Journal
	err := s.control(ctx, http.MethodGet, "/_mock/journal", nil, &j)
	return j, err
}

var errNoOwner = errors.New("attack: the direct stack has no owner API")
