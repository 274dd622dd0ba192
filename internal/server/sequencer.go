package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/countersign/countersign/internal/ledger"
)

// sealer is what the sequencer needs of the ledger.
type sealer interface {
	Seal(ctx context.Context, signer note.Signer) (ledger.SealReport, error)
}

// sequencerMetrics count what the sequencer did.
type sequencerMetrics struct {
	sealed, failures prometheus.Counter
}

func newSequencerMetrics(reg prometheus.Registerer) sequencerMetrics {
	m := sequencerMetrics{
		sealed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "countersign_audit_sealed_records_total",
			Help: "Audit records this process sealed into the signed log.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "countersign_audit_seal_failures_total",
			Help: "Sealing passes that failed (retried at the next interval).",
		}),
	}
	reg.MustRegister(m.sealed, m.failures)
	return m
}

// runSequencer seals new audit records every interval until ctx ends, off
// every deciding transaction: it contends only with other sequencers (of
// this or another process sharing the ledger), on each account's log row.
// A failure is logged once per streak and retried at the next tick.
func runSequencer(ctx context.Context, store sealer, signer note.Signer, interval time.Duration, log *slog.Logger, m sequencerMetrics) {
	every(ctx, interval, "audit sealing", log, m.failures, func(ctx context.Context) error {
		rep, err := store.Seal(ctx, signer)
		// A failing account does not stop the others: what they sealed
		// counts even when the pass reports a failure.
		m.sealed.Add(float64(rep.Records))
		if err != nil {
			return err
		}
		if rep.Records > 0 {
			log.Debug("audit records sealed", "records", rep.Records, "accounts", rep.Accounts)
		}
		return nil
	})
}

// every runs pass at once and then every interval until ctx ends. A
// failing pass is counted in failures and logged once per streak (what
// "failed; retrying every interval"), and the recovery once; the next
// tick tries again.
func every(ctx context.Context, interval time.Duration, what string, log *slog.Logger, failures prometheus.Counter, pass func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		err := pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			failures.Inc()
			if !failing {
				log.Warn(what+" failed; retrying every interval", "err", err, "interval", interval)
			}
			failing = true
		case err == nil:
			if failing {
				log.Info(what + " recovered")
			}
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
