// Package metrics holds Countersign's Prometheus instruments. They live on a
// registry the server owns (no global registration), prefixed countersign_.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the process's instruments.
type Metrics struct {
	Registry *prometheus.Registry

	// Decisions counts answers by source, verdict and reason code.
	Decisions *prometheus.CounterVec
	// CheckSeconds is the latency of one decision from request to answer.
	CheckSeconds *prometheus.HistogramVec
	// LedgerReady is 1 while the ledger answers with a current schema.
	LedgerReady prometheus.Gauge
}

// New registers every instrument on a fresh registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_decisions_total",
			Help: "Decisions answered, by source (ext_authz, decide), verdict and reason code.",
		}, []string{"source", "verdict", "reason_code"}),
		CheckSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "countersign_decision_seconds",
			Help:    "Time from receiving a request to answering it, by source and verdict.",
			Buckets: []float64{.0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1, 2},
		}, []string{"source", "verdict"}),
		LedgerReady: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "countersign_ledger_ready",
			Help: "1 while the ledger is reachable and its schema is current, else 0.",
		}),
	}
	reg.MustRegister(m.Decisions, m.CheckSeconds, m.LedgerReady,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
