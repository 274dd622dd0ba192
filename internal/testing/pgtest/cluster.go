package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"
)

// Superuser is the role every pgtest cluster is initialised with.
const Superuser = "postgres"

// LogFile is the server log's name inside the data directory.
const LogFile = "postgres.log"

const (
	defaultStartTimeout = time.Minute // crash recovery after Kill is inside this too
	closeTimeout        = 30 * time.Second
	logTailLines        = 40
)

// defaultSettings are the server settings of every cluster, passed on the command line
// so they also apply to a reused data directory. Durability settings stay at their
// production values: the product's commit latency and crash claims are measured here.
var defaultSettings = map[string]string{
	"listen_addresses":        "127.0.0.1",
	"unix_socket_directories": "", // TCP only: no socket path for root and postgres to share
	"max_connections":         "200",
	"shared_buffers":          "32MB",
	"fsync":                   "on",
	"synchronous_commit":      "on",
	"full_page_writes":        "on",
	"jit":                     "off", // compile time dominates tiny test queries
	"timezone":                "UTC",
	"log_destination":         "stderr",
	"logging_collector":       "off",
	"log_line_prefix":         "%m [%p] %q%u@%d ",
}

// ClusterOptions configures StartCluster. The zero value starts a throwaway cluster on a
// free port in a temporary directory that Close removes.
type ClusterOptions struct {
	// DataDir is the cluster's data directory. Empty: a new temporary directory, removed
	// by Close. Otherwise it is created if missing, initialised if empty, and reused as is
	// (never re-initialised) if it already holds a cluster; Close leaves it in place.
	// When running as root, the postgres OS user must be able to reach it.
	DataDir string
	// Port to listen on at 127.0.0.1. 0 picks a free port.
	Port int
	// BinDir holds initdb and postgres. Empty: Binaries().
	BinDir string
	// Settings are extra server settings (name → value), applied over the defaults.
	Settings map[string]string
	// StartTimeout bounds each start (including crash recovery) when the context has no
	// earlier deadline. 0 means one minute.
	StartTimeout time.Duration
}

// Cluster is a private PostgreSQL server started from the local binaries.
type Cluster struct {
	binDir       string
	dataDir      string
	tempDir      string // created by pgtest and removed by Close; "" for a caller's DataDir
	port         int
	settings     map[string]string
	cred         *syscall.Credential
	startTimeout time.Duration

	mu     sync.Mutex
	pm     *postmaster // nil while stopped
	closed bool
}

// postmaster is one run of the server process.
type postmaster struct {
	pid  int
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // exit status, valid after done
}

// NewCluster starts a throwaway cluster for one test and stops and removes it in
// t.Cleanup. It always uses the local binaries, never DATABASE_URL.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, ClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("pgtest: close cluster: %v", err)
		}
	})
	return c
}

// StartCluster initialises (if needed) and starts a cluster, and returns once it accepts
// connections. The caller must Close it.
func StartCluster(ctx context.Context, opts ClusterOptions) (_ *Cluster, err error) {
	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = Binaries(); err != nil {
			return nil, err
		}
	} else if !hasServerBinaries(binDir) {
		return nil, fmt.Errorf("%w in %s (it must hold initdb and postgres)", ErrNoBinaries, binDir)
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		binDir:       binDir,
		port:         opts.Port,
		settings:     maps.Clone(defaultSettings),
		cred:         cred,
		startTimeout: opts.StartTimeout,
	}
	maps.Copy(c.settings, opts.Settings)
	if c.startTimeout <= 0 {
		c.startTimeout = defaultStartTimeout
	}
	defer func() {
		if err != nil && c.tempDir != "" {
			_ = os.RemoveAll(c.tempDir)
		}
	}()
	if err := c.prepareDataDir(ctx, opts.DataDir); err != nil {
		return nil, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if opts.Port == 0 {
			if c.port, err = freePort(ctx); err != nil {
				return nil, err
			}
		}
		err = c.startLocked(ctx)
		if err == nil {
			return c, nil
		}
		// A free port can be taken between our probe and the server's bind (parallel
		// test binaries pick ports too), so pick another on "address in use".
		var se *startError
		if opts.Port != 0 || attempt == 4 || !errors.As(err, &se) || !se.addrInUse() || ctx.Err() != nil {
			return nil, err
		}
	}
}

// prepareDataDir creates and initialises the data directory, or checks that an existing
// cluster there matches the binaries.
func (c *Cluster) prepareDataDir(ctx context.Context, dataDir string) error {
	temp := dataDir == ""
	if temp {
		sweepStale()
		base, err := os.MkdirTemp("", tempDirPrefix)
		if err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		c.tempDir = base
		if err := writeOwner(base); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		// The base stays 0700 but belongs to the server's user, so root and that user
		// can both enter it (t.TempDir's root-only parents would lock postgres out).
		if err := chownTo(base, c.cred); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		dataDir = filepath.Join(base, "data")
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	c.dataDir = abs
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := checkReachable(filepath.Dir(c.dataDir), c.cred); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		return c.checkVersion(ctx)
	}
	if err := chownTo(c.dataDir, c.cred); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	args := []string{"-D", c.dataDir, "-U", Superuser, "-A", "trust", "-E", "UTF8", "--locale=C"}
	if temp {
		args = append(args, "--no-sync") // a throwaway cluster need not survive an OS crash
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "initdb"), args...)
	cmd.Dir = c.dataDir // the caller's working directory may be closed to the postgres user
	cmd.SysProcAttr = sysProcAttr(c.cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		msg := fmt.Sprintf("pgtest: initdb %s: %v\n%s", c.dataDir, err, bytes.TrimSpace(out))
		if c.cred != nil {
			msg += "\n(running as root: initdb runs as the postgres OS user, which must be able to reach and own this directory)"
		}
		return errors.New(msg)
	}
	return nil
}

// checkVersion refuses to start a data directory written by another major version.
func (c *Cluster) checkVersion(ctx context.Context) error {
	b, err := os.ReadFile(filepath.Join(c.dataDir, "PG_VERSION"))
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	dirVersion := strings.TrimSpace(string(b))
	out, err := exec.CommandContext(ctx, filepath.Join(c.binDir, "postgres"), "--version").Output()
	if err != nil {
		return fmt.Errorf("pgtest: postgres --version: %w", err)
	}
	// "postgres (PostgreSQL) 15.18 (Debian …)"
	_, after, _ := strings.Cut(string(out), ") ")
	binVersion, _, _ := strings.Cut(strings.Fields(after + " ?")[0], ".")
	if binVersion != dirVersion {
		return fmt.Errorf("pgtest: data directory %s belongs to PostgreSQL %s but the binaries in %s are PostgreSQL %s; remove the directory or set COUNTERSIGN_PG_BIN",
			c.dataDir, dirVersion, c.binDir, binVersion)
	}
	return nil
}

func freePort(ctx context.Context) (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// URL returns the connection URL of database on this cluster.
func (c *Cluster) URL(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port is the TCP port the cluster listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// DataDir is the cluster's data directory; the server log is LogFile inside it.
func (c *Cluster) DataDir() string { return c.dataDir }

// PID is the postmaster's process id, or 0 while the cluster is stopped.
func (c *Cluster) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pm == nil {
		return 0
	}
	return c.pm.pid
}

// CreateDatabase creates database name, cloned from template ("" = the server default).
func (c *Cluster) CreateDatabase(ctx context.Context, name, template string) error {
	return createDatabase(ctx, c.URL("postgres"), name, template)
}

// DropDatabase drops database name, ending any sessions still connected to it.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	return dropDatabase(ctx, c.URL("postgres"), name)
}

// Start starts a stopped cluster again on the same port and data directory and waits
// until it accepts connections. Starting a running cluster does nothing.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pgtest: cluster is closed")
	}
	if c.pm != nil {
		select {
		case <-c.pm.done: // died on its own; start it again
			c.pm = nil
		default:
			return nil
		}
	}
	return c.startLocked(ctx)
}

// Stop shuts the server down in fast mode (sessions are ended, a shutdown checkpoint is
// written) and waits for it to exit. Stopping a stopped cluster does nothing. If ctx ends
// first, the server is killed and Stop returns the context's error.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked(ctx)
}

// Kill simulates a server crash: the postmaster and all its children get SIGKILL (the
// postmaster is frozen first so it cannot fork replacements), and Kill returns once they
// are gone. The next Start runs crash recovery.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pm == nil {
		return errors.New("pgtest: kill: cluster is not running")
	}
	return c.killLocked()
}

// Close stops the server and, if pgtest created the data directory, removes it.
// Closing twice does nothing.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	err := c.stopLocked(ctx)
	if c.tempDir != "" {
		if rmErr := os.RemoveAll(c.tempDir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("pgtest: %w", rmErr))
		}
	}
	return err
}

func (c *Cluster) stopLocked(ctx context.Context) error {
	pm := c.pm
	if pm == nil {
		return nil
	}
	select {
	case <-pm.done: // already exited (and reaped: its pid may belong to someone else now)
		c.pm = nil
		return nil
	default:
	}
	if err := syscall.Kill(pm.pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgtest: stop: %w", err)
	}
	select {
	case <-pm.done:
		c.pm = nil
		return nil
	case <-ctx.Done():
		if err := c.killLocked(); err != nil {
			return errors.Join(fmt.Errorf("pgtest: fast shutdown: %w", ctx.Err()), err)
		}
		return fmt.Errorf("pgtest: fast shutdown did not finish (%w); the server was killed", ctx.Err())
	}
}

func (c *Cluster) killLocked() error {
	pm := c.pm
	select {
	case <-pm.done:
		c.pm = nil
		return nil
	default:
	}
	// Freeze the postmaster so the children we list are all there will be.
	_ = syscall.Kill(pm.pid, syscall.SIGSTOP)
	children, listErr := childPIDs(pm.pid)
	for _, pid := range children {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(pm.pid, syscall.SIGKILL)
	select {
	case <-pm.done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("pgtest: postmaster %d survived SIGKILL for 10s", pm.pid)
	}
	c.pm = nil
	// A new postmaster refuses to start while an old backend still holds the shared memory.
	gone := waitUntil(context.Background(), 10*time.Second, 5*time.Millisecond, func() bool {
		return !slices.ContainsFunc(children, processAlive)
	})
	if !gone {
		return fmt.Errorf("pgtest: children of postmaster %d survived SIGKILL for 10s", pm.pid)
	}
	return listErr
}

// startLocked launches the postmaster and waits until it accepts a real connection.
func (c *Cluster) startLocked(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.startTimeout)
		defer cancel()
	}
	logPath := filepath.Join(c.dataDir, LogFile)
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgtest: open server log: %w", err)
	}
	var logStart int64
	if fi, err := logFile.Stat(); err == nil {
		logStart = fi.Size()
	}
	_ = chownTo(logPath, c.cred)

	args := []string{"-D", c.dataDir, "-c", "port=" + strconv.Itoa(c.port)}
	for _, name := range slices.Sorted(maps.Keys(c.settings)) {
		args = append(args, "-c", name+"="+c.settings[name])
	}
	// The server outlives the start deadline: only Stop, Kill and Close end it.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), filepath.Join(c.binDir, "postgres"), args...)
	cmd.Dir = c.dataDir
	cmd.Stdout, cmd.Stderr = logFile, logFile // *os.File: no copying goroutines
	cmd.SysProcAttr = sysProcAttr(c.cred)
	pm, err := spawn(cmd)
	_ = logFile.Close() // the server holds its own descriptor
	if err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	c.pm = pm

	if err := c.waitReady(ctx, pm); err != nil {
		var exited bool
		select {
		case <-pm.done:
			exited = true
			c.pm = nil
		default:
			_ = c.killLocked()
		}
		return &startError{cause: err, exited: exited, logPath: logPath, tail: logTail(logPath, logStart)}
	}
	return nil
}

// spawn starts cmd from a goroutine locked to its OS thread and reaps it there. Linux
// sends the parent-death signal when the forking thread exits, not the process; keeping
// that thread locked until the server exits means only the death of the whole program
// triggers it.
func spawn(cmd *exec.Cmd) (*postmaster, error) {
	pm := &postmaster{done: make(chan struct{})}
	started := make(chan error, 1)
	// A closure, not "go reap(…)": tests elsewhere already ignore this goroutine by the
	// name spawn.func1. New code should use IgnoreServerGoroutines, which matches reap.
	go func() { reap(cmd, pm, started) }()
	if err := <-started; err != nil {
		return nil, err
	}
	return pm, nil
}

// reap is the goroutine that owns a server process from start to exit. Its name is
// matched by IgnoreServerGoroutines.
func reap(cmd *exec.Cmd, pm *postmaster, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		started <- err
		return
	}
	pm.pid = cmd.Process.Pid
	started <- nil
	pm.err = cmd.Wait()
	close(pm.done)
}

// IgnoreServerGoroutines is a goleak option for per-test leak checks
// (goleak.VerifyNone(t, pgtest.IgnoreServerGoroutines())): while a cluster runs, one
// goroutine waits for its server process. Clusters stopped by Close or Main's teardown
// leave none.
func IgnoreServerGoroutines() goleak.Option {
	return goleak.IgnoreAnyFunction("github.com/countersign/countersign/internal/testing/pgtest.reap")
}

// waitReady polls with real connections until one succeeds, the server exits or ctx ends.
func (c *Cluster) waitReady(ctx context.Context, pm *postmaster) error {
	url := c.URL("postgres")
	// An attempt can hang on whatever else listens on the port; the server's exit must
	// end it at once.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-pm.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		attemptCtx, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgconn.Connect(attemptCtx, url)
		cancelAttempt()
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-pm.done:
			return fmt.Errorf("postgres exited during start (%w)", pm.err)
		case <-ctx.Done():
			select {
			case <-pm.done: // the exit cancelled ctx
				return fmt.Errorf("postgres exited during start (%w)", pm.err)
			default:
			}
			return fmt.Errorf("not accepting connections on port %d before the deadline (%w); last attempt: %w", c.port, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// startError is a failed start, with the end of the server log.
type startError struct {
	cause   error
	exited  bool
	logPath string
	tail    string
}

func (e *startError) Error() string {
	return fmt.Sprintf("pgtest: start cluster: %v\n--- last lines of %s ---\n%s", e.cause, e.logPath, e.tail)
}

func (e *startError) Unwrap() error { return e.cause }

func (e *startError) addrInUse() bool {
	return e.exited && (strings.Contains(e.tail, "Address already in use") ||
		strings.Contains(e.tail, "could not create any TCP/IP sockets"))
}

// logTail returns the last lines the server wrote to the log since offset.
func logTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer func() { _ = f.Close() }()
	const maxBytes = 16 << 10
	if fi, err := f.Stat(); err == nil && fi.Size()-offset > maxBytes {
		offset = fi.Size() - maxBytes
	}
	b, err := io.ReadAll(io.NewSectionReader(f, offset, maxBytes))
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}

// createDatabase runs CREATE DATABASE name [TEMPLATE template] through adminURL.
func createDatabase(ctx context.Context, adminURL, name, template string) error {
	sql := "CREATE DATABASE " + quoteIdent(name)
	if template != "" {
		sql += " TEMPLATE " + quoteIdent(template)
	}
	return execAdmin(ctx, adminURL, sql)
}

// dropDatabase drops name (if it exists), ending sessions still connected to it.
func dropDatabase(ctx context.Context, adminURL, name string) error {
	return execAdmin(ctx, adminURL, "DROP DATABASE IF EXISTS "+quoteIdent(name)+" WITH (FORCE)")
}

// execAdmin runs statements on a short-lived connection. CREATE/DROP DATABASE cannot run
// inside a transaction, so they go through the simple protocol one statement at a time.
func execAdmin(ctx context.Context, adminURL string, statements ...string) error {
	conn, err := pgconn.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for _, sql := range statements {
		if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}

func quoteIdent(name string) string { return pgx.Identifier{name}.Sanitize() }
