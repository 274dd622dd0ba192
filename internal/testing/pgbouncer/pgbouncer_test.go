package pgbouncer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/countersign/countersign/internal/testing/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m, nil)) }

func connect(t *testing.T, url string) *pgconn.PgConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func backendPID(t *testing.T, c *pgconn.PgConn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Exec(ctx, "SELECT pg_backend_pid()").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return string(res[0].Rows[0][0])
}

// TestTransactionPooling: with one server connection, two client sessions
// that are both open take turns on it. Session pooling would make the second
// wait until the first disconnects; transaction pooling hands the server
// connection back after every transaction.
func TestTransactionPooling(t *testing.T) {
	db := pgtest.NewDatabase(t)
	b := New(t, db, Options{PoolSize: 1})
	first, second := connect(t, b.URL(db)), connect(t, b.URL(db))
	a, c := backendPID(t, first), backendPID(t, second)
	if a != c {
		t.Fatalf("two clients through a pool of one reached backends %s and %s", a, c)
	}
	if again := backendPID(t, first); again != a {
		t.Fatalf("the pool of one has a second backend %s (first %s)", again, a)
	}
}

func TestCloseStopsIt(t *testing.T) {
	db := pgtest.NewDatabase(t)
	b := New(t, db, Options{})
	url := b.URL(db)
	backendPID(t, connect(t, url))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := pgconn.Connect(ctx, url); err == nil {
		_ = c.Close(ctx)
		t.Fatal("connected through a closed PgBouncer")
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestMissingBinaryNamesTheInstall(t *testing.T) {
	t.Setenv("COUNTERSIGN_PGBOUNCER", "/nonexistent/pgbouncer")
	_, err := Start(context.Background(), "postgres://postgres@127.0.0.1:1/postgres", Options{})
	if !errors.Is(err, ErrNoBinary) || !strings.Contains(err.Error(), "apt-get install -y pgbouncer") {
		t.Fatalf("Start without a binary = %v, want ErrNoBinary naming the install", err)
	}
}

func TestURLKeepsUserAndDatabase(t *testing.T) {
	b := &Bouncer{port: 6543}
	got := b.URL("postgres://alice:secret@10.0.0.1:5432/ledger?sslmode=disable")
	if want := "postgres://alice@127.0.0.1:6543/ledger?sslmode=disable"; got != want {
		t.Fatalf("URL = %s, want %s", got, want)
	}
}
