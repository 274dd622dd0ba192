package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/internal/ledger"
)

// pruner is what the pruning loop needs of the ledger.
type pruner interface {
	Prune(ctx context.Context) (ledger.Pruned, error)
}

// pruneMetrics count what pruning deleted.
type pruneMetrics struct {
	rows     *prometheus.CounterVec
	failures prometheus.Counter
}

func newPruneMetrics(reg prometheus.Registerer) pruneMetrics {
	m := pruneMetrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_ledger_pruned_rows_total",
			Help: "Rows the ledger deleted because nothing can use them any more, by table.",
		}, []string{"table"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "countersign_ledger_prune_failures_total",
			Help: "Pruning passes that failed (retried at the next interval).",
		}),
	}
	reg.MustRegister(m.rows, m.failures)
	return m
}

// runPruner prunes the ledger (ledger.Store.Prune) at start and then every
// interval until ctx ends. It runs beside the deciding path and never
// blocks it: what it deletes nothing writes or counts any more. Every
// replica prunes; each deletes what the others left.
func runPruner(ctx context.Context, store pruner, interval time.Duration, log *slog.Logger, m pruneMetrics) {
	every(ctx, interval, "pruning the ledger", log, m.failures, func(ctx context.Context) error {
		p, err := store.Prune(ctx)
		if err != nil {
			return err
		}
		m.rows.WithLabelValues("window_buckets").Add(float64(p.WindowBuckets))
		m.rows.WithLabelValues("owner_sessions").Add(float64(p.OwnerSessions))
		if p != (ledger.Pruned{}) {
			log.Info("ledger pruned", "window_buckets", p.WindowBuckets, "owner_sessions", p.OwnerSessions)
		}
		return nil
	})
}
