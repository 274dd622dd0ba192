package outbox

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the dispatcher's instruments; a nil *Metrics records nothing.
type Metrics struct {
	// Deliveries counts attempts by result: delivered, failed (will be
	// retried), dead (a dead letter) or lease_lost (not recorded).
	Deliveries *prometheus.CounterVec
	// Lag is the time from an event to its acknowledged delivery.
	Lag prometheus.Histogram
}

// NewMetrics registers the dispatcher's instruments on reg. Every result
// is exported from the start, at zero, so a dashboard's query names a
// series before the first delivery.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_webhook_deliveries_total",
			Help: "Webhook delivery attempts by result (delivered, failed, dead, lease_lost).",
		}, []string{"result"}),
		Lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "countersign_outbox_lag_seconds",
			Help:    "Time from an event being written to its webhook acknowledging it.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}),
	}
	for _, r := range []string{"delivered", "failed", "dead", "lease_lost"} {
		m.Deliveries.WithLabelValues(r)
	}
	reg.MustRegister(m.Deliveries, m.Lag)
	return m
}

func (m *Metrics) count(result string) {
	if m != nil {
		m.Deliveries.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) lag(seconds float64) {
	if m != nil {
		m.Lag.Observe(seconds)
	}
}
