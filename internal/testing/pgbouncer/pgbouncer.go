package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/countersign/countersign/internal/testing/pgtest"
)

// ErrNoBinary reports that no pgbouncer executable was found.
var ErrNoBinary = errors.New("pgbouncer: no pgbouncer binary found; install it (as root: apt-get update && apt-get install -y pgbouncer) or set COUNTERSIGN_PGBOUNCER to its path")

const (
	defaultPoolSize      = 8
	defaultMaxClientConn = 500
	defaultStartTimeout  = 30 * time.Second
	stopTimeout          = 10 * time.Second
	bindAttempts         = 5
)

// Options configure Start. The zero value is a small transaction pool.
type Options struct {
	// PoolSize is default_pool_size: server connections per database and
	// user, shared by every client. 0 means 8.
	PoolSize int
	// MaxClientConn is max_client_conn. 0 means 500.
	MaxClientConn int
	// StartTimeout bounds the start when the context has no earlier
	// deadline. 0 means 30 s.
	StartTimeout time.Duration
	// Binary is the pgbouncer executable. Empty: Binary().
	Binary string
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	port    int
	admin   string // the user PgBouncer's admin console admits
	dir     string
	logPath string
	pid     int
	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // exit status, valid after done

	closeOnce sync.Once
	closeErr  error
}

// Binary finds pgbouncer: $COUNTERSIGN_PGBOUNCER, then $PATH, then the
// sbin directories distributions install it in (often not on a non-root
// user's PATH).
func Binary() (string, error) {
	if p := os.Getenv("COUNTERSIGN_PGBOUNCER"); p != "" {
		if _, err := os.Stat(p); err != nil { //nolint:gosec // the test runner names its own binary
			return "", fmt.Errorf("%w (COUNTERSIGN_PGBOUNCER=%s: %w)", ErrNoBinary, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", ErrNoBinary
}

// New starts a PgBouncer in front of the server of backendURL (any database
// URL on it; its user is the one PgBouncer lets in) and stops it in
// t.Cleanup. Failure to start fails the test.
func New(t testing.TB, backendURL string, opts Options) *Bouncer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Start(ctx, backendURL, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("pgbouncer: close: %v", err)
		}
	})
	return b
}

// Start runs PgBouncer in transaction pooling mode in front of the server of
// backendURL and returns once a query through it has been answered. The
// caller must Close it.
func Start(ctx context.Context, backendURL string, opts Options) (_ *Bouncer, err error) {
	backend, err := url.Parse(backendURL)
	if err != nil || (backend.Scheme != "postgres" && backend.Scheme != "postgresql") || backend.Hostname() == "" {
		return nil, fmt.Errorf("pgbouncer: backend must be a postgres://user@host:port/database URL")
	}
	bin := opts.Binary
	if bin == "" {
		if bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.StartTimeout)
		defer cancel()
	}
	cred, err := pgtest.ServerCredential()
	if err != nil {
		return nil, err
	}
	// Under the system temporary directory, which the postgres user can
	// enter (t.TempDir's parents are 0700).
	dir, err := os.MkdirTemp("", "countersign-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := pgtest.ChownTo(dir, cred); err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	for attempt := 1; ; attempt++ {
		b, err := launch(ctx, bin, dir, backend, opts, cred)
		if err == nil {
			return b, nil
		}
		// The free port can be taken between the probe and PgBouncer's bind.
		if attempt == bindAttempts || !strings.Contains(err.Error(), "Address already in use") || ctx.Err() != nil {
			return nil, err
		}
	}
}

// launch writes the configuration for a fresh port, starts PgBouncer and
// waits until it answers.
func launch(ctx context.Context, bin, dir string, backend *url.URL, opts Options, cred *syscall.Credential) (*Bouncer, error) {
	port, err := pgtest.FreePort(ctx)
	if err != nil {
		return nil, err
	}
	userName := backend.User.Username()
	if userName == "" {
		userName = "postgres"
	}
	b := &Bouncer{port: port, dir: dir, admin: userName, logPath: filepath.Join(dir, "pgbouncer.log"), done: make(chan struct{})}
	ini := filepath.Join(dir, "pgbouncer.ini")
	authFile := filepath.Join(dir, "userlist.txt")
	for path, content := range map[string]string{
		ini:       iniFile(backend, port, authFile, userName, opts),
		authFile:  quoteAuth(userName) + " \"\"\n",
		b.logPath: "",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return nil, fmt.Errorf("pgbouncer: %w", err)
		}
		if err := pgtest.ChownTo(path, cred); err != nil {
			return nil, fmt.Errorf("pgbouncer: %w", err)
		}
	}
	logFile, err := os.OpenFile(b.logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	// The process outlives the start deadline: only Close ends it.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), bin, ini)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile // *os.File: no copying goroutines
	cmd.SysProcAttr = sysProcAttr(cred)
	err = spawn(cmd, b)
	_ = logFile.Close()
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: start %s: %w", bin, err)
	}
	probe := *backend
	probe.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	probe.User = url.User(userName) // trusted: no password through the pooler
	if err := b.waitReady(ctx, probe.String()); err != nil {
		_ = b.stop()
		return nil, fmt.Errorf("pgbouncer: %w\npgbouncer log:\n%s", err, b.Log())
	}
	return b, nil
}

// iniFile is the configuration: every database name goes to the backend
// server, clients are trusted by name (loopback only), and server
// connections are pooled per transaction.
func iniFile(backend *url.URL, port int, authFile, userName string, opts Options) string {
	poolSize := opts.PoolSize
	if poolSize <= 0 {
		poolSize = defaultPoolSize
	}
	maxClients := opts.MaxClientConn
	if maxClients <= 0 {
		maxClients = defaultMaxClientConn
	}
	backendPort := backend.Port()
	if backendPort == "" {
		backendPort = "5432"
	}
	target := "host=" + connValue(backend.Hostname()) + " port=" + backendPort
	if pw, ok := backend.User.Password(); ok {
		// The backend wants a password: PgBouncer logs in as the URL's
		// user with it, whoever the (trusted, local) client is.
		target += " user=" + connValue(userName) + " password=" + connValue(pw)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "[databases]\n* = %s\n\n[pgbouncer]\n", target)
	for _, kv := range [][2]string{
		{"listen_addr", "127.0.0.1"},
		{"listen_port", strconv.Itoa(port)},
		{"unix_socket_dir", ""},
		{"auth_type", "trust"},
		{"auth_file", authFile},
		{"admin_users", userName},
		{"pool_mode", "transaction"},
		{"default_pool_size", strconv.Itoa(poolSize)},
		{"min_pool_size", "0"},
		{"reserve_pool_size", "0"},
		{"max_client_conn", strconv.Itoa(maxClients)},
		{"server_reset_query", ""},
		{"log_connections", "0"},
		{"log_disconnections", "0"},
		{"stats_period", "3600"},
	} {
		fmt.Fprintf(&s, "%s = %s\n", kv[0], kv[1])
	}
	return s.String()
}

// connValue quotes a libpq-style connection string value.
func connValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// quoteAuth quotes a name for PgBouncer's auth file (a doubled quote escapes).
func quoteAuth(v string) string { return `"` + strings.ReplaceAll(v, `"`, `""`) + `"` }

// URL is databaseURL (a database on the backend server) through the pooler:
// the same user and database, PgBouncer's address, no password (PgBouncer
// trusts the local client and logs in to the server itself).
func (b *Bouncer) URL(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return ""
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

// Show runs SHOW what (CLIENTS, SERVERS, POOLS, …) on PgBouncer's admin
// console and returns its rows as column → value.
func (b *Bouncer) Show(ctx context.Context, what string) ([]map[string]string, error) {
	u := url.URL{Scheme: "postgres", User: url.User(b.admin), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)), Path: "/pgbouncer"}
	conn, err := pgconn.Connect(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: admin console: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	res, err := conn.Exec(ctx, "SHOW "+what).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: SHOW %s: %w", what, err)
	}
	var rows []map[string]string
	for _, r := range res {
		for _, row := range r.Rows {
			m := map[string]string{}
			for i, f := range r.FieldDescriptions {
				m[f.Name] = string(row[i])
			}
			rows = append(rows, m)
		}
	}
	return rows, nil
}

// Port is the TCP port PgBouncer listens on at 127.0.0.1.
func (b *Bouncer) Port() int { return b.port }

// Log is PgBouncer's log so far.
func (b *Bouncer) Log() string {
	out, _ := os.ReadFile(b.logPath)
	return string(out)
}

// Close stops PgBouncer (immediate shutdown: its clients' sessions end) and
// removes its directory. Closing twice does nothing.
func (b *Bouncer) Close() error {
	b.closeOnce.Do(func() {
		b.closeErr = b.stop()
		if err := os.RemoveAll(b.dir); err != nil && b.closeErr == nil {
			b.closeErr = err
		}
	})
	return b.closeErr
}

func (b *Bouncer) stop() error {
	select {
	case <-b.done:
		return nil
	default:
	}
	_ = syscall.Kill(b.pid, syscall.SIGTERM)
	select {
	case <-b.done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = syscall.Kill(b.pid, syscall.SIGKILL)
	<-b.done
	return fmt.Errorf("pgbouncer %d ignored SIGTERM for %s and was killed", b.pid, stopTimeout)
}

// waitReady polls with real queries through the pooler until one is
// answered, PgBouncer exits or ctx ends.
func (b *Bouncer) waitReady(ctx context.Context, probeURL string) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := probe(ctx, probeURL)
		if err == nil {
			return nil
		}
		select {
		case <-b.done:
			if b.waitErr == nil {
				return errors.New("pgbouncer exited during start (status 0)")
			}
			return fmt.Errorf("pgbouncer exited during start (%w)", b.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("not answering on port %d before the deadline (%w); last attempt: %w", b.port, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func probe(ctx context.Context, probeURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, probeURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, "SELECT 1").ReadAll()
	return err
}

// spawn starts cmd from a goroutine locked to its OS thread, which reaps it:
// Linux sends the parent-death signal when the forking thread exits, so the
// thread stays until PgBouncer does.
func spawn(cmd *exec.Cmd, b *Bouncer) error {
	started := make(chan error, 1)
	go reap(cmd, b, started)
	return <-started
}

func reap(cmd *exec.Cmd, b *Bouncer, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		started <- err
		return
	}
	b.pid = cmd.Process.Pid
	started <- nil
	b.waitErr = cmd.Wait()
	close(b.done)
}
