package reconcile

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/internal/ledger"
)

// Outcome labels of countersign_reconcile_outcomes_total: the finding
// outcomes, quarantined for an inconclusive pass that ended the intent in
// QUARANTINED, and record_failed when the finding could not be recorded
// (the claim lapses and a later pass takes the intent again).
const (
	outcomeQuarantined  = "quarantined"
	outcomeRecordFailed = "record_failed"
)

// Metrics are the reconciler's instruments; a nil *Metrics records nothing.
type Metrics struct {
	// Outcomes counts reconciled intents by outcome.
	Outcomes *prometheus.CounterVec
	// LeasesExpired counts attempts whose lease lapsed into UNKNOWN.
	LeasesExpired prometheus.Counter
}

// NewMetrics registers the reconciler's instruments on reg. Every outcome
// is exported from the start, at zero, so a dashboard's query names a
// series before the first intent is reconciled.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_reconcile_outcomes_total",
			Help: "Intents reconciled, by outcome (found_applied, confirmed_absent, inconclusive, quarantined, record_failed).",
		}, []string{"outcome"}),
		LeasesExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "countersign_reconcile_leases_expired_total",
			Help: "Attempts whose lease lapsed with no answer, moved to UNKNOWN for reconciliation.",
		}),
	}
	for _, o := range []string{string(ledger.FindingApplied), string(ledger.FindingAbsent), string(ledger.FindingInconclusive),
		outcomeQuarantined, outcomeRecordFailed} {
		m.Outcomes.WithLabelValues(o)
	}
	reg.MustRegister(m.Outcomes, m.LeasesExpired)
	return m
}

func (m *Metrics) outcome(o string) {
	if m != nil {
		m.Outcomes.WithLabelValues(o).Inc()
	}
}

func (m *Metrics) expired(n int) {
	if m != nil && n > 0 {
		m.LeasesExpired.Add(float64(n))
	}
}
