package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/metrics"
	"github.com/countersign/countersign/internal/testing/pgproxy"
	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/testclock"
	"github.com/countersign/countersign/internal/testing/wait"
)

// countingProber counts its probes; while hold is set, each waits for it
// to be closed (or for its context to end).
type countingProber struct {
	next  Prober // nil: answer err
	err   atomic.Pointer[error]
	calls atomic.Int64
	hold  chan struct{}
	// ctxErr is the probe's context's error when it answered.
	ctxErr atomic.Pointer[error]
}

func (p *countingProber) Ready(ctx context.Context) error {
	p.calls.Add(1)
	if p.hold != nil {
		select {
		case <-p.hold:
		case <-ctx.Done():
		}
	}
	cerr := ctx.Err()
	p.ctxErr.Store(&cerr)
	if cerr != nil {
		return cerr
	}
	if p.next != nil {
		return p.next.Ready(ctx)
	}
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

func (p *countingProber) fail(err error) { p.err.Store(&err) }

func testReadiness(p Prober, clock *testclock.Clock) *readiness {
	return &readiness{prober: p, health: health.NewServer(), metrics: metrics.New(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), services: []string{""}, now: clock.Now}
}

func (r *readiness) sharers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sharing
}

func (r *readiness) serving(t *testing.T) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	resp, err := r.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatus()
}

func newClock() *testclock.Clock { return testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) }

// Concurrent /readyz callers share one probe in flight, and a fresh result
// answers without a probe: /readyz is reachable unauthenticated, and a probe
// per request let a flood take the ledger pool from decisions.
func TestReadyzSharesOneProbe(t *testing.T) {
	clock := newClock()
	p := &countingProber{hold: make(chan struct{})}
	r := testReadiness(p, clock)

	const callers = 32
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { errs[i] = r.answer(context.Background()) })
	}
	if !wait.Until(10*time.Second, func() bool { return p.calls.Load() == 1 && r.sharers() == callers-1 }) {
		t.Errorf("want 1 probe and %d callers sharing it, have %d probes and %d sharing", callers-1, p.calls.Load(), r.sharers())
	}
	close(p.hold)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	if n := p.calls.Load(); n != 1 {
		t.Fatalf("%d concurrent /readyz ran %d probes, want 1", callers, n)
	}

	clock.Advance(readyzFreshFor - time.Millisecond)
	for range 100 {
		if err := r.answer(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.calls.Load(); n != 1 {
		t.Fatalf("/readyz within %s of a probe ran %d probes, want 1", readyzFreshFor, n)
	}
	clock.Advance(time.Millisecond)
	if err := r.answer(context.Background()); err != nil || p.calls.Load() != 2 {
		t.Fatalf("/readyz after %s: %v after %d probes, want a second probe", readyzFreshFor, err, p.calls.Load())
	}
}

// A failed probe is reported not-ready (the error itself, gRPC health, the
// gauge), from the cache too, and the next probe after the window sees the
// recovery.
func TestReadyzReportsFailureFromCache(t *testing.T) {
	clock := newClock()
	p := &countingProber{}
	behind := fmt.Errorf("%w (database at 1, binary needs 2)", ledger.ErrSchemaBehind)
	p.fail(behind)
	r := testReadiness(p, clock)
	r.notYet()

	for range 10 {
		if err := r.answer(context.Background()); !errors.Is(err, ledger.ErrSchemaBehind) {
			t.Fatalf("readyz with the schema behind: %v", err)
		}
	}
	if n := p.calls.Load(); n != 1 {
		t.Fatalf("%d probes, want 1", n)
	}
	if st := r.serving(t); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health %v, want NOT_SERVING", st)
	}

	p.fail(nil)
	clock.Advance(readyzFreshFor)
	if err := r.answer(context.Background()); err != nil {
		t.Fatalf("readyz after recovery: %v", err)
	}
	if st := r.serving(t); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v, want SERVING", st)
	}
}

// A /readyz caller that goes away cuts short neither the probe it started
// (others share it) nor gRPC health: the agent could otherwise flip the
// server to NOT_SERVING by hanging up.
func TestReadyzCallerLeavingDoesNotFailTheProbe(t *testing.T) {
	clock := newClock()
	p := &countingProber{hold: make(chan struct{})}
	r := testReadiness(p, clock)

	ctx, cancel := context.WithCancel(context.Background())
	var leaderErr error
	var wg sync.WaitGroup
	wg.Go(func() { leaderErr = r.answer(ctx) })
	if !wait.Until(10*time.Second, func() bool { return p.calls.Load() == 1 }) {
		t.Fatal("no probe")
	}
	waiterCtx, waiterCancel := context.WithCancel(context.Background())
	var waiterErr error
	wg.Go(func() { waiterErr = r.answer(waiterCtx) })
	if !wait.Until(10*time.Second, func() bool { return r.sharers() == 1 }) {
		t.Fatal("the second caller did not share the probe")
	}
	cancel()
	waiterCancel()
	close(p.hold)
	wg.Wait()
	if leaderErr != nil {
		t.Fatalf("the probe failed when its caller left: %v", leaderErr)
	}
	if e := p.ctxErr.Load(); e != nil && *e != nil {
		t.Fatalf("the probe's context ended with its caller (%v)", *e)
	}
	if !errors.Is(waiterErr, context.Canceled) {
		t.Fatalf("a waiter that left: %v, want context.Canceled", waiterErr)
	}
	if st := r.serving(t); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v, want SERVING", st)
	}
}

// The readiness loop probes every interval whatever /readyz has cached
// (--readiness-interval keeps its meaning), and /readyz answers with the
// loop's result.
func TestReadinessLoopProbesEveryTime(t *testing.T) {
	clock := newClock()
	p := &countingProber{}
	r := testReadiness(p, clock)
	for range 3 {
		if err := r.probe(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.answer(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := p.calls.Load(); n != 3 {
		t.Fatalf("3 loop probes and a /readyz ran %d probes, want 3", n)
	}
}

// startProbed is start with the server's readiness probing through p (which
// wraps the store when p.next is nil) on clock.
func startProbed(t *testing.T, url string, p *countingProber, clock *testclock.Clock) *harness {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t, pgtest.IgnoreServerGoroutines()) })
	ctx := context.Background()
	// The loop's one probe (ReadinessInterval below) must not fail on a
	// slow connect: on a loaded machine a 1 s connect timeout left the
	// server never ready.
	store, err := ledger.Open(ctx, url, ledger.Options{ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if p.next == nil {
		p.next = store
	}
	cfg := config.Defaults()
	cfg.DatabaseURL = url
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.EnvoyAddr = "127.0.0.1:0", "127.0.0.1:0", testEnvoyAddr(t)
	cfg.ReadinessInterval = time.Minute // the loop's first probe only
	srv, err := New(cfg, store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.ready.prober, srv.ready.now = p, clock.Now
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		store.Close()
	})
	return &harness{store: store, srv: srv, http: "http://" + srv.HTTPAddr()}
}

// floodGet sends n GETs of path from clients goroutines at once and returns
// the status codes seen.
func floodGet(t *testing.T, base, path string, clients, n int) map[int]int {
	t.Helper()
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer cl.CloseIdleConnections()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range n {
				resp, err := cl.Get(base + path)
				if err != nil {
					t.Errorf("GET %s: %v", path, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return codes
}

// A flood of /readyz over HTTP probes the ledger once per window.
func TestReadyzFloodProbesLedgerOnce(t *testing.T) {
	clock := newClock()
	p := &countingProber{}
	h := startProbed(t, pgtest.NewDatabase(t), p, clock)
	if !wait.Until(15*time.Second, func() bool { s, _ := h.get(t, "/readyz"); return s == 200 }) {
		t.Fatal("never ready")
	}
	clock.Advance(readyzFreshFor) // the loop's first result is stale now
	before := p.calls.Load()
	codes := floodGet(t, h.http, "/readyz", 64, 4)
	if codes[200] != 64*4 {
		t.Fatalf("readyz answers %v, want %d 200s", codes, 64*4)
	}
	if n := p.calls.Load() - before; n != 1 {
		t.Fatalf("%d /readyz within %s ran %d ledger probes, want 1", 64*4, readyzFreshFor, n)
	}
}

// The reviewer's flood (R3-D): /readyz and /metrics from 64 clients, counted
// on the wire. Each path may reach the ledger once per its window (and the
// loop once per interval), whatever the number of requests.
func TestReadyzAndMetricsFloodBoundedOnTheWire(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	px, err := pgproxy.Start(context.Background(), u.Host)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = px.Addr()
	h := startWith(t, u.String(), func(c *config.Config) {
		c.ReadinessInterval = time.Minute
		c.OutboxInterval, c.ReconcileInterval, c.PruneInterval = 0, 0, 0
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { _ = px.Close() }) // registered after startWith's cleanups, so it runs before their goleak check
	// Every answer must be 200: a probe that took longer than its 2 s on a
	// loaded machine (CI under -race, through the proxy) answered 503 for
	// its window. What is counted here is the probes, not their speed.
	h.srv.ready.mu.Lock()
	h.srv.ready.timeout = time.Minute
	h.srv.ready.mu.Unlock()
	if !wait.Until(15*time.Second, func() bool { s, _ := h.get(t, "/readyz"); return s == 200 }) {
		t.Fatal("never ready")
	}

	const clients, each = 64, 5
	before, start := px.Counts(), time.Now()
	var wg sync.WaitGroup
	var readyz, scrapes map[int]int
	wg.Go(func() { readyz = floodGet(t, h.http, "/readyz", clients/2, each) })
	wg.Go(func() { scrapes = floodGet(t, h.http, "/metrics", clients/2, each) })
	wg.Wait()
	elapsed := time.Since(start)
	trips := px.Counts().Sub(before).RoundTrips

	if readyz[200] != clients/2*each || scrapes[200] != clients/2*each {
		t.Fatalf("answers: /readyz %v, /metrics %v", readyz, scrapes)
	}
	// A query is at most 3 round trips (a statement's first use prepares
	// it); the loop probes at most twice in the test.
	windows := func(every time.Duration) int64 { return int64(math.Ceil(float64(elapsed)/float64(every))) + 1 }
	bound := 3 * (windows(readyzFreshFor) + windows(5*time.Second) + 2)
	t.Logf("%d requests in %v: %d ledger round trips (bound %d)", clients*each, elapsed, trips, bound)
	if trips > bound {
		t.Fatalf("%d requests to /readyz and /metrics in %v made %d ledger round trips, want at most %d",
			clients*each, elapsed, trips, bound)
	}
}
