package pgtest

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
)

func TestClusterCreateAndCloneDatabase(t *testing.T) {
	start := time.Now()
	c := NewCluster(t)
	t.Logf("initdb + start: %v (port %d)", time.Since(start), c.Port())
	ctx := context.Background()

	if err := c.CreateDatabase(ctx, "base", ""); err != nil {
		t.Fatal(err)
	}
	base := connect(t, c.URL("base"))
	if _, err := base.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	if err := base.Close(ctx); err != nil { // a template must have no sessions
		t.Fatal(err)
	}
	start = time.Now()
	if err := c.CreateDatabase(ctx, "copy", "base"); err != nil {
		t.Fatal(err)
	}
	t.Logf("CREATE DATABASE … TEMPLATE: %v", time.Since(start))
	if got := queryInt(t, connect(t, c.URL("copy")), "SELECT v FROM t"); got != 42 {
		t.Fatalf("clone has v=%d, want 42", got)
	}

	if err := c.DropDatabase(ctx, "copy"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, c.URL("copy")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("connect to dropped database: err = %v", err)
	}

	conn := connect(t, c.URL("postgres"))
	for setting, want := range map[string]string{
		"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on",
		"max_connections": "200", "listen_addresses": "127.0.0.1", "unix_socket_directories": "",
	} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
}

func TestClusterStopStart(t *testing.T) {
	c := NewCluster(t)
	ctx := context.Background()
	port := c.Port()
	conn := connect(t, c.URL("postgres"))
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop: %v", time.Since(start))
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("an open session still works after Stop")
	}
	if _, err := pgx.Connect(ctx, c.URL("postgres")); err == nil {
		t.Fatal("a new connection works after Stop")
	}
	if c.PID() != 0 {
		t.Fatal("PID is set after Stop")
	}

	start = time.Now()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart: %v", time.Since(start))
	if c.Port() != port {
		t.Fatalf("port changed from %d to %d", port, c.Port())
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start on a running cluster: %v", err)
	}
	if got := queryInt(t, connect(t, c.URL("postgres")), "SELECT v FROM kept"); got != 1 {
		t.Fatalf("kept = %d after restart, want 1", got)
	}
}

func TestClusterKillRecovers(t *testing.T) {
	c := NewCluster(t)
	ctx := context.Background()
	conn := connect(t, c.URL("postgres"))
	if _, err := conn.Exec(ctx, "CREATE TABLE committed (v int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO committed VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	pm := c.PID()
	children, err := childPIDs(pm)
	if err != nil || len(children) == 0 {
		t.Fatalf("children of postmaster %d: %v, %v", pm, children, err)
	}

	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range append(children, pm) {
		if processAlive(pid) {
			t.Fatalf("process %d survived Kill", pid)
		}
	}
	if _, err := pgx.Connect(ctx, c.URL("postgres")); err == nil {
		t.Fatal("a new connection works after Kill")
	}
	if err := c.Kill(); err == nil {
		t.Fatal("Kill on a killed cluster did not fail")
	}

	start := time.Now()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("start with crash recovery: %v", time.Since(start))
	if got := queryInt(t, connect(t, c.URL("postgres")), "SELECT v FROM committed"); got != 7 {
		t.Fatalf("committed row = %d after crash, want 7", got)
	}
	log, err := os.ReadFile(filepath.Join(c.DataDir(), LogFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "automatic recovery in progress") {
		t.Fatalf("the server log shows no crash recovery:\n%s", log)
	}
}

func TestClusterCloseRemovesEverything(t *testing.T) {
	c, err := StartCluster(context.Background(), ClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pm, dir := c.PID(), c.tempDir
	children, _ := childPIDs(pm)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after Close (stat: %v)", dir, err)
	}
	for _, pid := range append(children, pm) {
		if processAlive(pid) {
			t.Fatalf("process %d outlived Close", pid)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Start(context.Background()); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

// reachableTempDir makes a directory that the server's OS user can reach and that the
// test removes (t.TempDir's parents are closed to postgres when tests run as root).
func reachableTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "countersign-pgtest-reuse-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	return dir
}

func TestStartClusterReusesDataDir(t *testing.T) {
	ctx := context.Background()
	dataDir := filepath.Join(reachableTempDir(t), "pg")

	first, err := StartCluster(ctx, ClusterOptions{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Close() }() // on early failure; closed below
	conn, err := pgx.Connect(ctx, first.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE survives (v int); INSERT INTO survives VALUES (3)"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); err != nil {
		t.Fatalf("Close removed a caller's data directory: %v", err)
	}

	port := freeTestPort(t)
	second, err := StartCluster(ctx, ClusterOptions{DataDir: dataDir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := second.Close(); err != nil {
			t.Error(err)
		}
	})
	if second.Port() != port {
		t.Fatalf("port = %d, want the requested %d", second.Port(), port)
	}
	if got := queryInt(t, connect(t, second.URL("postgres")), "SELECT v FROM survives"); got != 3 {
		t.Fatalf("survives = %d, want 3: the data directory was not reused", got)
	}
}

func TestStartClusterDataDirReachability(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "pg")
	c, err := StartCluster(context.Background(), ClusterOptions{DataDir: dataDir})
	if os.Geteuid() == 0 {
		// t.TempDir's parents are 0700 root: the postgres user cannot get in.
		if err == nil || !strings.Contains(err.Error(), "postgres OS user, which cannot enter") {
			t.Fatalf("err = %v, want a clear reachability error", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("a non-root user's own temp dir must work: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStartClusterRejectsOtherMajorVersion(t *testing.T) {
	dataDir := filepath.Join(reachableTempDir(t), "pg")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "PG_VERSION"), []byte("9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := StartCluster(context.Background(), ClusterOptions{DataDir: dataDir})
	if err == nil || !strings.Contains(err.Error(), "belongs to PostgreSQL 9") {
		t.Fatalf("err = %v, want a version mismatch", err)
	}
}

func TestStartErrorsIncludeLogTail(t *testing.T) {
	t.Run("bad setting", func(t *testing.T) {
		before := tempClusterDirs(t)
		_, err := StartCluster(context.Background(), ClusterOptions{Settings: map[string]string{"shared_buffers": "plenty"}})
		if err == nil || !strings.Contains(err.Error(), `invalid value for parameter "shared_buffers"`) {
			t.Fatalf("err = %v, want the server's complaint from its log", err)
		}
		if after := tempClusterDirs(t); len(after) > len(before) {
			t.Fatalf("a failed start left a directory behind: %v", after)
		}
	})
	t.Run("port in use", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Close() }()
		port := l.Addr().(*net.TCPAddr).Port
		_, err = StartCluster(context.Background(), ClusterOptions{Port: port})
		if err == nil || !strings.Contains(err.Error(), "Address already in use") {
			t.Fatalf("err = %v, want the bind failure from the log", err)
		}
	})
}

const abandonHelperEnv = "PGTEST_ABANDON_HELPER"

func abandonHelper() {
	c, err := StartCluster(context.Background(), ClusterOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if _, err := fmt.Printf("%d %s\n", c.PID(), c.tempDir); err != nil {
		os.Exit(3)
	}
	os.Exit(0) // no Close
}

// tempClusterDirs lists the temporary cluster directories this process owns (other
// test binaries may be creating their own meanwhile).
func tempClusterDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	mine := fmt.Sprintf("%s %d\n", host, os.Getpid())
	var owned []string
	for _, dir := range dirs {
		if owner, err := os.ReadFile(filepath.Join(dir, ownerFile)); err == nil && string(owner) == mine {
			owned = append(owned, dir)
		}
	}
	return owned
}

func freeTestPort(t *testing.T) int {
	t.Helper()
	port, err := freePort(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func BenchmarkStartCluster(b *testing.B) {
	for b.Loop() {
		c, err := StartCluster(context.Background(), ClusterOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
