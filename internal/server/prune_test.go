package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestServePrunesTheLedger: serve deletes, every --prune-interval, a window
// counter past every window and an owner session expired two days ago,
// keeps a recent counter, and counts what it deleted in /metrics.
func TestServePrunesTheLedger(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	h := startWith(t, url, func(c *config.Config) { c.PruneInterval = 20 * time.Millisecond },
		slog.New(slog.NewTextHandler(&syncBuffer{}, nil)))
	// Written after serve started, so only a later pass can delete them.
	if _, err := db.Exec(ctx, `
		INSERT INTO window_buckets (mandate_hash, by_payee, key, bucket, currency, shard, calls, amount_minor)
		VALUES ('m', false, 'agent_a', countersign_window_bucket(now() - interval '40 days'), 'USD', 0, 1, 100),
		       ('m', false, 'agent_a', countersign_window_bucket(now() - interval '1 day'), 'USD', 0, 1, 100)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `
		INSERT INTO owner_sessions (id, secret_hash, owner_id, subject, method, created_at, expires_at)
		VALUES ('oss_expiredlongago', sha256('x'), 'owner_1', 'oidc-subject', 'oidc', now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	left := func() (buckets, sessions int) {
		if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM window_buckets), (SELECT count(*) FROM owner_sessions)`).Scan(&buckets, &sessions); err != nil {
			t.Fatal(err)
		}
		return buckets, sessions
	}
	if !wait.Until(10*time.Second, func() bool { b, s := left(); return b == 1 && s == 0 }) {
		b, s := left()
		t.Fatalf("after 10s %d window counters and %d sessions are left, want the day-old counter only", b, s)
	}
	_, body := h.get(t, "/metrics")
	for _, want := range []string{`countersign_ledger_pruned_rows_total{table="window_buckets"} 1`, `countersign_ledger_pruned_rows_total{table="owner_sessions"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestEveryLogsAFailingStreakOnce: a background pass (sealing, pruning)
// that fails is counted each time, logged once per streak and once when
// it recovers, and tried again every interval until its context ends.
func TestEveryLogsAFailingStreakOnce(t *testing.T) {
	var logs syncBuffer
	failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_failures_total"})
	ctx, cancel := context.WithCancel(context.Background())
	var passes atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		every(ctx, time.Millisecond, "testing", slog.New(slog.NewTextHandler(&logs, nil)), failures, func(context.Context) error {
			if n := passes.Add(1); n == 2 || n == 3 || n == 5 {
				return errors.New("the ledger is away")
			}
			return nil
		})
	}()
	if !wait.Until(10*time.Second, func() bool { return passes.Load() >= 7 }) {
		t.Fatalf("%d passes in 10s at a 1ms interval", passes.Load())
	}
	cancel()
	<-done
	var m dto.Metric
	if err := failures.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetCounter().GetValue(); n != 3 {
		t.Errorf("failures = %v, want 3", n)
	}
	out := logs.String()
	if f, r := strings.Count(out, "testing failed; retrying every interval"), strings.Count(out, "testing recovered"); f != 2 || r != 2 {
		t.Errorf("the log says failed %d and recovered %d times, want 2 and 2 (two streaks):\n%s", f, r, out)
	}
}
