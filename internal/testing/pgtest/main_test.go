package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(abandonHelperEnv) != "" {
		abandonHelper() // a child process of TestAbandonedClusterDies; never returns
	}
	// The leak check runs after Wrap's teardown: every server stopped and reaped.
	goleak.VerifyTestMain(Wrap(m, prepareWidgets))
}

// prepareWidgets stands in for the ledger's migrations.
func prepareWidgets(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, `CREATE TABLE widgets (id int PRIMARY KEY, name text NOT NULL);
		INSERT INTO widgets VALUES (1, 'seed')`)
	return err
}

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func queryInt(t testing.TB, conn *pgx.Conn, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func databaseOf(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

func TestNewDatabaseClonesTemplate(t *testing.T) {
	start := time.Now()
	first := NewDatabase(t)
	t.Logf("clone from template: %v", time.Since(start))
	second := NewDatabase(t)
	if first == second {
		t.Fatalf("two calls returned the same database %s", first)
	}
	a, b := connect(t, first), connect(t, second)
	if got := queryInt(t, a, "SELECT count(*) FROM widgets"); got != 1 {
		t.Fatalf("clone has %d widgets, want the template's 1", got)
	}
	if _, err := a.Exec(context.Background(), "INSERT INTO widgets VALUES (2, 'mine')"); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, b, "SELECT count(*) FROM widgets"); got != 1 {
		t.Fatalf("second clone sees %d widgets, want 1: clones must be independent", got)
	}
	var current string
	if err := a.QueryRow(context.Background(), "SELECT current_database()").Scan(&current); err != nil {
		t.Fatal(err)
	}
	if want := databaseOf(t, first); current != want || !strings.HasPrefix(current, "testnewdatabaseclonestemplate_") {
		t.Fatalf("connected to %q, URL names %q", current, want)
	}
}

func TestIgnoreServerGoroutines(t *testing.T) {
	NewCluster(t)
	if goleak.Find() == nil {
		t.Fatal("goleak sees no goroutine for a running cluster, so the option below proves nothing")
	}
	goleak.VerifyNone(t, IgnoreServerGoroutines())
	// The name other packages' tests used before IgnoreServerGoroutines existed.
	goleak.VerifyNone(t, goleak.IgnoreAnyFunction("github.com/countersign/countersign/internal/testing/pgtest.spawn.func1"))
}

func TestNewDatabaseDroppedAfterTest(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) { name = databaseOf(t, NewDatabase(t)) })
	e := active.Load()
	conn := connect(t, e.admin.String())
	if n := queryInt(t, conn, "SELECT count(*) FROM pg_database WHERE datname = $1", name); n != 0 {
		t.Fatalf("database %s still exists after its test ended", name)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM pg_database WHERE datname = $1 AND NOT datallowconn", e.template); n != 1 {
		t.Fatalf("template %s missing or open to connections", e.template)
	}
}

func TestNewDatabaseParallel(t *testing.T) {
	const n = 12
	var mu sync.Mutex
	var names []string
	for i := range n {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			url := NewDatabase(t)
			conn := connect(t, url)
			if _, err := conn.Exec(context.Background(), "INSERT INTO widgets VALUES ($1, 'parallel')", 100+i); err != nil {
				t.Fatal(err)
			}
			if got := queryInt(t, conn, "SELECT count(*) FROM widgets"); got != 2 {
				t.Fatalf("clone has %d widgets, want 2 (seed + own): another test wrote here", got)
			}
			mu.Lock()
			names = append(names, databaseOf(t, url))
			mu.Unlock()
		})
	}
	t.Cleanup(func() {
		slices.Sort(names)
		if len(slices.Compact(names)) != n {
			t.Errorf("parallel tests shared databases: %v", names)
		}
	})
}

// deferredCleanup keeps t.Cleanup functions instead of running them, to see what
// teardown does with databases whose tests never cleaned up.
type deferredCleanup struct {
	testing.TB
	fns []func()
}

func (d *deferredCleanup) Cleanup(f func()) { d.fns = append(d.fns, f) }

// TestExternalServer runs Main's DATABASE_URL mode against a cluster started here.
func TestExternalServer(t *testing.T) {
	server := NewCluster(t)
	ctx := context.Background()
	if err := server.CreateDatabase(ctx, "bystander", ""); err != nil {
		t.Fatal(err)
	}
	before := databases(t, server)

	t.Run("COUNTERSIGN_TEST_DATABASE_URL wins and teardown drops only its own databases", func(t *testing.T) {
		getenv := mapEnv(map[string]string{
			"COUNTERSIGN_TEST_DATABASE_URL": server.URL("postgres"),
			"DATABASE_URL":                  "postgres://nobody@127.0.0.1:1/unused?sslmode=disable", // must lose
		})
		e, err := newEnv(ctx, prepareWidgets, getenv)
		if err != nil {
			t.Fatal(err)
		}
		if e.cluster != nil {
			t.Fatal("started a cluster although a database URL was given")
		}
		t.Run("clone", func(t *testing.T) {
			conn := connect(t, e.newDatabase(t))
			if got := queryInt(t, conn, "SELECT count(*) FROM widgets"); got != 1 {
				t.Fatalf("clone has %d widgets, want 1", got)
			}
		})
		leftover := &deferredCleanup{TB: t}
		leftoverName := databaseOf(t, e.newDatabase(leftover))
		if got := databases(t, server); !slices.Contains(got, e.template) || !slices.Contains(got, leftoverName) {
			t.Fatalf("databases during the run = %v, want the template and %s", got, leftoverName)
		}
		if err := e.close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := databases(t, server); !slices.Equal(got, before) {
			t.Fatalf("databases after teardown = %v, want exactly those before = %v", got, before)
		}
		for _, f := range leftover.fns {
			f() // a late cleanup after teardown must not fail
		}
		if server.PID() == 0 {
			t.Fatal("teardown of an external server stopped it")
		}
	})

	t.Run("DATABASE_URL alone", func(t *testing.T) {
		e, err := newEnv(ctx, nil, mapEnv(map[string]string{"DATABASE_URL": server.URL("postgres")}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := e.close(ctx); err != nil {
				t.Error(err)
			}
		})
		if e.cluster != nil || !slices.Contains(databases(t, server), e.template) {
			t.Fatalf("DATABASE_URL was not used")
		}
	})

	t.Run("prepare error cleans up", func(t *testing.T) {
		boom := errors.New("migration 7 failed")
		_, err := newEnv(ctx, func(context.Context, string) error { return boom },
			mapEnv(map[string]string{"DATABASE_URL": server.URL("postgres")}))
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v, want the prepare error", err)
		}
		if got := databases(t, server); !slices.Equal(got, before) {
			t.Fatalf("databases after a failed prepare = %v, want %v", got, before)
		}
	})

	t.Run("prepare leaving a session open", func(t *testing.T) {
		var leaked *pgx.Conn
		e, err := newEnv(ctx, func(ctx context.Context, url string) (err error) {
			leaked, err = pgx.Connect(ctx, url)
			return err
		}, mapEnv(map[string]string{"DATABASE_URL": server.URL("postgres")}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := e.close(ctx); err != nil {
				t.Error(err)
			}
		})
		t.Cleanup(func() { _ = leaked.Close(ctx) }) // the server ended the session; free the socket
		// Fails with "source database is being accessed by other users" unless the
		// template was sealed.
		e.newDatabase(t)
	})

	for _, tc := range []struct{ name, url, want string }{
		{"not a URL", "host=localhost dbname=x", "must be a postgres://"},
		{"unreachable", "postgres://u:secret@127.0.0.1:1/db?sslmode=disable&connect_timeout=2", "create template database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newEnv(ctx, nil, mapEnv(map[string]string{"DATABASE_URL": tc.url}))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
}

func TestDatabaseName(t *testing.T) {
	long := "TestAVeryLongTestNameThatGoesOnAndOn/with_a_subtest_name_that_is_also_long_" + strings.Repeat("x", 80)
	for _, tc := range []struct{ name, test, want string }{
		{"plain", "TestFoo", "testfoo_abcd1234_7"},
		{"subtest", "TestFoo/case #2: ünïcode", "testfoo_case_2_n_code_abcd1234_7"},
		{"leading digit", "123", "t123_abcd1234_7"},
		{"empty", "///", "t_abcd1234_7"},
		{"long", long, "testaverylongtestnamethatgoesonandon_with_a_subtest_abcd1234_7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := databaseName(tc.test, "abcd1234", 7)
			if got != tc.want {
				t.Fatalf("databaseName(%q) = %q, want %q", tc.test, got, tc.want)
			}
			if len(got) > maxNameLen {
				t.Fatalf("%q is %d bytes, over %d", got, len(got), maxNameLen)
			}
		})
	}
}

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func databases(t testing.TB, c *Cluster) []string {
	t.Helper()
	conn := connect(t, c.URL("postgres"))
	rows, err := conn.Query(context.Background(), "SELECT datname FROM pg_database ORDER BY datname")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func BenchmarkNewDatabase(b *testing.B) {
	for b.Loop() {
		NewDatabase(b) // dropped after the benchmark, outside the timing
	}
}
