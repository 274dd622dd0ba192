package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/countersign/countersign/internal/logging"
	"github.com/countersign/countersign/internal/metrics"
)

// Prober is what readiness asks: nil when the ledger answers with a current
// schema.
type Prober interface {
	Ready(ctx context.Context) error
}

// readiness probes the ledger and keeps gRPC health, the metric and the
// cached answer in step. /readyz probes live; the loop keeps gRPC health
// honest between HTTP probes.
type readiness struct {
	prober   Prober
	health   *health.Server
	metrics  *metrics.Metrics
	log      *slog.Logger
	services []string

	mu      sync.Mutex
	lastErr error
	known   bool
}

const probeTimeout = 2 * time.Second

// probe checks the ledger once and publishes the result.
func (r *readiness) probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := r.prober.Ready(pctx)
	r.publish(err)
	return err
}

// notYet says NOT_SERVING before the first probe, without logging: a
// start is not an outage, and the first probe logs whichever it finds.
func (r *readiness) notYet() {
	for _, svc := range r.services {
		r.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	r.metrics.LedgerReady.Set(0)
}

func (r *readiness) publish(err error) {
	r.mu.Lock()
	changed := !r.known || (err == nil) != (r.lastErr == nil)
	r.lastErr, r.known = err, true
	r.mu.Unlock()

	st := healthpb.HealthCheckResponse_SERVING
	gauge := 1.0
	if err != nil {
		st, gauge = healthpb.HealthCheckResponse_NOT_SERVING, 0
	}
	for _, svc := range r.services {
		r.health.SetServingStatus(svc, st)
	}
	r.metrics.LedgerReady.Set(gauge)
	if changed {
		if err != nil {
			r.log.Warn("not ready", "err", logging.OneLine(err))
		} else {
			r.log.Info("ready")
		}
	}
}

// run probes every interval until ctx ends.
func (r *readiness) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		_ = r.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
