package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rails"
)

// settling expires two leases and settles each claimed intent as its SIK
// says: Q ends QUARANTINED, E fails to record, anything else goes back to
// UNKNOWN.
type settling struct{ work []ledger.ReconcileWork }

func (s *settling) ExpireLeasesIn(context.Context, int, time.Duration, ledger.ReconcileScope) (int, error) {
	return 2, nil
}
func (s *settling) ClaimReconcileIn(context.Context, string, time.Duration, int, ledger.ReconcileScope) ([]ledger.ReconcileWork, error) {
	return s.work, nil
}
func (s *settling) RecordFinding(_ context.Context, f ledger.Finding) (ledger.Intent, error) {
	switch f.SIK {
	case "Q":
		return ledger.Intent{State: "QUARANTINED"}, nil
	case "E":
		return ledger.Intent{}, errors.New("connection reset")
	}
	return ledger.Intent{State: "UNKNOWN"}, nil
}

func TestPassCountsOutcomes(t *testing.T) {
	var work []ledger.ReconcileWork
	for _, s := range []string{"A", "B", "Q", "E"} {
		work = append(work, ledger.ReconcileWork{
			Intent:  ledger.Intent{Key: ledger.Key{RailAccount: "acct_gone", SIK: s}, Canonical: `{}`, AttemptCount: 1},
			Attempt: ledger.Attempt{Seq: 1, Stamp: "X"},
		})
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	w := New(&settling{work: work}, oneAccount{&rails.Account{ID: "acct_1"}}, Options{Metrics: m}, slog.New(slog.DiscardHandler))
	if _, err := w.Pass(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"inconclusive": 2, "quarantined": 1, "record_failed": 1, "found_applied": 0, "confirmed_absent": 0}
	for outcome, n := range want {
		if got := value(t, m.Outcomes.WithLabelValues(outcome)); got != n {
			t.Errorf("outcome %s = %v, want %v", outcome, got, n)
		}
	}
	if got := value(t, m.LeasesExpired); got != 2 {
		t.Errorf("leases expired = %v, want 2", got)
	}
	// Without metrics a pass records nothing and does not fail.
	if _, err := New(&settling{work: work}, oneAccount{&rails.Account{ID: "acct_1"}}, Options{}, slog.New(slog.DiscardHandler)).Pass(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var out dto.Metric
	if err := c.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetCounter().GetValue()
}
