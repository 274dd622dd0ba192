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
// cached answer in step. The loop probes every readiness interval and keeps
// gRPC health honest; /readyz answers from the last result while it is
// fresh. At most one probe is in flight: a caller arriving meanwhile shares
// its result rather than taking another of the pool's connections.
type readiness struct {
	prober   Prober
	health   *health.Server
	metrics  *metrics.Metrics
	log      *slog.Logger
	services []string
	now      func() time.Time

	mu      sync.Mutex
	lastErr error
	known   bool
	at      time.Time // when lastErr arrived
	flight  *flight   // the probe in flight, nil when none
	sharing int       // callers waiting on flight (tests watch it)
	// timeout bounds one probe (0 is probeTimeout; read under mu). Tests
	// that flood a loaded machine lengthen it: what they count is the
	// probes, not how fast the ledger answers.
	timeout time.Duration
}

// flight is one probe; err is set before done is closed.
type flight struct {
	done chan struct{}
	err  error
}

const probeTimeout = 2 * time.Second

// readyzFreshFor is how long /readyz answers with the last probe's result.
// The HTTP listener is reachable unauthenticated (by the agent among
// others), and a probe per request would let a flood of /readyz take the
// pool's connections from decisions: /readyz starts at most one probe a
// second, so its answer can be that old.
const readyzFreshFor = time.Second

// answer is /readyz's: the last result if it is fresh, else a probe's.
// The probe outlives ctx: other callers may be sharing it, and one caller
// going away says nothing about the ledger.
func (r *readiness) answer(ctx context.Context) error {
	return r.result(ctx, readyzFreshFor, context.WithoutCancel(ctx))
}

// probe checks the ledger once (or shares the probe already in flight) and
// publishes the result.
func (r *readiness) probe(ctx context.Context) error {
	return r.result(ctx, 0, ctx)
}

// result is the last probe's result if it arrived less than fresh ago,
// else the result of the probe in flight, else of a new one run under
// probeCtx. A caller whose ctx ends while it waits gets ctx's error.
func (r *readiness) result(ctx context.Context, fresh time.Duration, probeCtx context.Context) error {
	r.mu.Lock()
	if r.known && fresh > 0 && r.now().Sub(r.at) < fresh {
		err := r.lastErr
		r.mu.Unlock()
		return err
	}
	if f := r.flight; f != nil {
		r.sharing++
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.sharing--
			r.mu.Unlock()
		}()
		select {
		case <-f.done:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	r.flight = f
	timeout := r.timeout
	r.mu.Unlock()

	if timeout == 0 {
		timeout = probeTimeout
	}
	pctx, cancel := context.WithTimeout(probeCtx, timeout)
	defer cancel()
	f.err = r.prober.Ready(pctx)
	r.publish(f)
	close(f.done)
	return f.err
}

// notYet says NOT_SERVING before the first probe, without logging: a
// start is not an outage, and the first probe logs whichever it finds.
func (r *readiness) notYet() {
	for _, svc := range r.services {
		r.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	r.metrics.LedgerReady.Set(0)
}

// publish records f's result and ends the flight. Health and the gauge are
// set before the flight ends, so a later probe's result cannot be
// overwritten by this one's.
func (r *readiness) publish(f *flight) {
	err := f.err
	st := healthpb.HealthCheckResponse_SERVING
	gauge := 1.0
	if err != nil {
		st, gauge = healthpb.HealthCheckResponse_NOT_SERVING, 0
	}
	for _, svc := range r.services {
		r.health.SetServingStatus(svc, st)
	}
	r.metrics.LedgerReady.Set(gauge)

	r.mu.Lock()
	changed := !r.known || (err == nil) != (r.lastErr == nil)
	r.lastErr, r.known, r.at, r.flight = err, true, r.now(), nil
	r.mu.Unlock()
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
