package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/testing/pgbouncer"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// openPooled opens a store through a fresh PgBouncer (transaction pooling,
// poolSize server connections) in front of database url.
func openPooled(t *testing.T, url string, poolSize int, opts Options) *Store {
	t.Helper()
	b := pgbouncer.New(t, url, pgbouncer.Options{PoolSize: poolSize})
	opts.Pooler = PoolerPgBouncer
	s, err := Open(context.Background(), b.URL(url), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestPooledStoreWorksThroughPgBouncer: a pooled store with more clients
// than PgBouncer has server connections runs transactions and autocommit
// statements (jsonb arguments included) concurrently, each transaction with
// synchronous_commit on, and nothing depends on landing on one session.
func TestPooledStoreWorksThroughPgBouncer(t *testing.T) {
	ctx := context.Background()
	s := openPooled(t, pgtest.NewDatabase(t), 2, Options{MaxConns: 6})
	if got := s.pool.Config().ConnConfig.DefaultQueryExecMode; got != pgx.QueryExecModeCacheDescribe {
		t.Fatalf("pooled exec mode = %v, want cache_describe", got)
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready through PgBouncer = %v", err)
	}
	agent, err := s.CreateAgent(ctx, "own_pool", "pooled")
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 6, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				err := s.InTx(ctx, func(tx *Tx) error {
					var sc string
					if err := tx.tx.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&sc); err != nil {
						return err
					}
					if sc != "on" {
						return fmt.Errorf("synchronous_commit is %q inside InTx", sc)
					}
					_, err := tx.tx.Exec(ctx, `UPDATE agents SET name = $2 WHERE id = $1`, agent.ID, fmt.Sprintf("w%d-%d", w, i))
					return err
				})
				if err == nil {
					_, err = s.RecordDecision(ctx, Decision{RequestID: fmt.Sprintf("pool-%d-%d", w, i), Source: "ext_authz", Verdict: "BLOCK",
						ReasonCode: "credential_missing", Reason: "no credential", Gates: []GateRecord{{Gate: "G1", Verdict: "BLOCK", ReasonCode: "credential_missing"}}})
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := s.DecisionsByRequest(ctx, "pool-0-0")
	if err != nil || len(got) != 1 || got[0].Gates[0].Gate != "G1" {
		t.Fatalf("DecisionsByRequest through PgBouncer = %+v, %v", got, err)
	}
}

// TestDirectSettingsAreRefusedByPgBouncer is why the pooler must be named:
// a store opened for PostgreSQL itself passes synchronous_commit as a
// startup parameter, which PgBouncer refuses.
func TestDirectSettingsAreRefusedByPgBouncer(t *testing.T) {
	url := pgtest.NewDatabase(t)
	b := pgbouncer.New(t, url, pgbouncer.Options{})
	s, err := Open(context.Background(), b.URL(url), Options{ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "synchronous_commit") {
		t.Fatalf("direct-mode Ping through PgBouncer = %v, want a refusal naming synchronous_commit", err)
	}
}

// TestPooledReadyRefusesAsynchronousCommit: behind a pooler the server's
// default is what autocommit writes get, so a default other than on is
// not-ready, not a quietly weaker ledger.
func TestPooledReadyRefusesAsynchronousCommit(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db := url[strings.LastIndex(url, "/")+1:]
	if i := strings.IndexByte(db, '?'); i >= 0 {
		db = db[:i]
	}
	direct := openTestURL(t, url)
	if _, err := direct.pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	s := openPooled(t, url, 1, Options{})
	if err := s.Ready(ctx); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("Ready with synchronous_commit off behind the pooler = %v, want ErrNotDurable", err)
	}
}

func openTestURL(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestPooledExecModeFollowsTheURL(t *testing.T) {
	cases := []struct {
		name, url string
		pooler    string
		want      pgx.QueryExecMode
	}{
		{"direct keeps pgx's default", "postgres://u@h/db", PoolerNone, pgx.QueryExecModeCacheStatement},
		{"pooled defaults to cache_describe", "postgres://u@h/db", PoolerPgBouncer, pgx.QueryExecModeCacheDescribe},
		{"pooled URL wins", "postgres://u@h/db?default_query_exec_mode=cache_statement", PoolerPgBouncer, pgx.QueryExecModeCacheStatement},
		{"pooled keyword/value string wins", "host=h user=u dbname=db default_query_exec_mode=exec", PoolerPgBouncer, pgx.QueryExecModeExec},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(context.Background(), tc.url, Options{Pooler: tc.pooler})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			cc := s.pool.Config().ConnConfig
			if got := cc.DefaultQueryExecMode; got != tc.want {
				t.Errorf("exec mode = %v, want %v", got, tc.want)
			}
			if _, sent := cc.RuntimeParams["synchronous_commit"]; sent == (tc.pooler == PoolerPgBouncer) {
				t.Errorf("synchronous_commit startup parameter sent = %v with pooler %q", sent, tc.pooler)
			}
		})
	}
	if _, err := Open(context.Background(), "postgres://u@h/db", Options{Pooler: "pgpool"}); err == nil {
		t.Error("Open accepted an unknown pooler")
	}
}
