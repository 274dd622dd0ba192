// Package metrics holds Countersign's Prometheus instruments. They live on a
// registry the server owns (no global registration), prefixed countersign_.
package metrics

import (
	"context"
	"fmt"
	"sync"
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

// quarantinedEvery is how long one count of the quarantined intents is
// reported. /metrics is reachable unauthenticated (by the agent among
// others), and a count per scrape would let a flood of scrapes take the
// ledger pool's connections from decisions.
const quarantinedEvery = 5 * time.Second

// WatchQuarantined exports countersign_quarantined_intents, read with count
// at most once every quarantinedEvery, under a short timeout; a scrape in
// between reports the last count, and concurrent scrapes share one count
// in flight. When count fails (the ledger is down or slow) the gauge is
// left out of the scrapes until the next count rather than reported stale
// or failing the whole scrape; countersign_ledger_ready says why.
func (m *Metrics) WatchQuarantined(count func(context.Context) (int64, error)) {
	m.watchQuarantined(count, time.Now)
}

func (m *Metrics) watchQuarantined(count func(context.Context) (int64, error), now func() time.Time) *countCollector {
	c := newCountCollector(prometheus.NewDesc("countersign_quarantined_intents",
		fmt.Sprintf("Intents in QUARANTINED, waiting for an operator, on the rail accounts this process serves; counted at most every %s.", quarantinedEvery),
		nil, nil), count, 2*time.Second, quarantinedEvery, now)
	m.Registry.MustRegister(c)
	return c
}

// countCollector is a gauge whose value is counted when a scrape finds the
// last count older than every.
type countCollector struct {
	desc    *prometheus.Desc
	count   func(context.Context) (int64, error)
	timeout time.Duration
	every   time.Duration
	now     func() time.Time

	mu      sync.Mutex
	n       int64
	err     error
	known   bool
	at      time.Time     // when n and err arrived
	flight  chan struct{} // closed when the count in flight ends; nil when none
	sharing int           // scrapes waiting on flight (tests watch it)
}

func newCountCollector(desc *prometheus.Desc, count func(context.Context) (int64, error), timeout, every time.Duration,
	now func() time.Time,
) *countCollector {
	return &countCollector{desc: desc, count: count, timeout: timeout, every: every, now: now}
}

func (c *countCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *countCollector) Collect(ch chan<- prometheus.Metric) {
	n, err := c.value()
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
}

// value is the last count if it is fresh, else the count in flight's (it
// ends within timeout), else a new count's.
func (c *countCollector) value() (int64, error) {
	c.mu.Lock()
	if c.known && c.now().Sub(c.at) < c.every {
		defer c.mu.Unlock()
		return c.n, c.err
	}
	if f := c.flight; f != nil {
		c.sharing++
		c.mu.Unlock()
		<-f
		c.mu.Lock()
		defer c.mu.Unlock()
		c.sharing--
		return c.n, c.err
	}
	f := make(chan struct{})
	c.flight = f
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	n, err := c.count(ctx)
	cancel()
	c.mu.Lock()
	c.n, c.err, c.known, c.at, c.flight = n, err, true, c.now(), nil
	c.mu.Unlock()
	close(f)
	return n, err
}
