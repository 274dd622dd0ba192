package server

import (
	"errors"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/metrics"
)

// observeLedger reports store's write transactions to m and exports the
// quarantined intents it holds.
func observeLedger(store *ledger.Store, m *metrics.Metrics) *ledger.Store {
	m.WatchQuarantined(store.CountQuarantined)
	return store.WithTxObserver(func(op string, elapsed time.Duration, err error) {
		m.LedgerTxSeconds.WithLabelValues(op, txOutcome(err)).Observe(elapsed.Seconds())
	})
}

// txOutcome is the outcome label of a write transaction that returned err.
func txOutcome(err error) string {
	switch {
	case err == nil:
		return metrics.TxCommitted
	case errors.Is(err, ledger.ErrUnavailable):
		return metrics.TxUnavailable
	default:
		return metrics.TxRolledBack
	}
}
