package server

import (
	"context"
	"errors"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/metrics"
	"github.com/countersign/countersign/internal/rails"
)

// observeLedger reports store's write transactions to m and exports the
// quarantined intents it holds on the rail accounts of rs, this process's
// own. Not every account of the ledger: /metrics answers anyone who can
// reach the HTTP listener, and a sidecar injected into an agent's pod
// serves that agent's accounts, while the ledger holds every owner's
// (found by a review: any pod of the cluster read how many intents other
// owners had quarantined).
func observeLedger(store *ledger.Store, rs *rails.Registry, m *metrics.Metrics) *ledger.Store {
	var accounts []string
	if rs != nil {
		for _, a := range rs.Accounts() {
			accounts = append(accounts, a.ID)
		}
	}
	m.WatchQuarantined(func(ctx context.Context) (int64, error) { return store.CountQuarantined(ctx, accounts) })
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
