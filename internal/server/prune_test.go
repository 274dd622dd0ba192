package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
