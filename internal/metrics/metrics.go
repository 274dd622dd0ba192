// Package metrics holds Countersign's Prometheus instruments. They live on a
// registry the server owns (no global registration), prefixed countersign_.
package metrics

import (
	"context"
	"time"

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
	// LedgerTxSeconds is the latency of one ledger write transaction, its
	// retries included, by operation and outcome.
	LedgerTxSeconds *prometheus.HistogramVec
}

// Outcomes of a ledger write transaction (LedgerTxSeconds's outcome label).
const (
	TxCommitted   = "committed"
	TxRolledBack  = "rolled_back"
	TxUnavailable = "unavailable"
)

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
		LedgerTxSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "countersign_ledger_tx_seconds",
			Help:    "Time one ledger write transaction took, retries included, by operation and outcome (committed, rolled_back, unavailable).",
			Buckets: []float64{.0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1, 2, 5},
		}, []string{"op", "outcome"}),
	}
	reg.MustRegister(m.Decisions, m.CheckSeconds, m.LedgerReady, m.LedgerTxSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// WatchQuarantined exports countersign_quarantined_intents, read with count
// at each scrape under a short timeout. When count fails (the ledger is
// down or slow) the gauge is left out of that scrape rather than reported
// stale or failing the whole scrape; countersign_ledger_ready says why.
func (m *Metrics) WatchQuarantined(count func(context.Context) (int64, error)) {
	m.Registry.MustRegister(&countCollector{
		desc: prometheus.NewDesc("countersign_quarantined_intents",
			"Intents in QUARANTINED, waiting for an operator, across every rail account.", nil, nil),
		count: count, timeout: 2 * time.Second,
	})
}

// countCollector is a gauge whose value is asked for at each scrape.
type countCollector struct {
	desc    *prometheus.Desc
	count   func(context.Context) (int64, error)
	timeout time.Duration
}

func (c *countCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *countCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	n, err := c.count(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
}
