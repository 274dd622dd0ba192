package metrics

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/countersign/countersign/internal/testing/testclock"
	"github.com/countersign/countersign/internal/testing/wait"
)

// quarantined is the countersign_quarantined_intents sample of one scrape
// of m, and whether it had one.
func quarantined(t *testing.T, m *Metrics) (float64, bool) {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Errorf("gather: %v", err)
		return 0, false
	}
	for _, f := range fams {
		if f.GetName() == "countersign_quarantined_intents" {
			return gauge(f), true
		}
	}
	return 0, false
}

func gauge(f *dto.MetricFamily) float64 { return f.GetMetric()[0].GetGauge().GetValue() }

// A scrape does not run the count while the last one is fresh: /metrics is
// reachable unauthenticated, and a count per scrape let a flood of scrapes
// take the ledger pool from decisions.
func TestQuarantinedCountedOncePerWindow(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var calls atomic.Int64
	m := New()
	m.watchQuarantined(func(context.Context) (int64, error) { return calls.Add(1) * 10, nil }, clock.Now)

	for i := range 50 {
		if v, ok := quarantined(t, m); !ok || v != 10 {
			t.Fatalf("scrape %d: %v %v, want 10", i, v, ok)
		}
	}
	clock.Advance(quarantinedEvery - time.Millisecond)
	if v, _ := quarantined(t, m); v != 10 || calls.Load() != 1 {
		t.Fatalf("within the window: value %v after %d counts, want 10 after 1", v, calls.Load())
	}
	clock.Advance(time.Millisecond)
	if v, _ := quarantined(t, m); v != 20 || calls.Load() != 2 {
		t.Fatalf("after the window: value %v after %d counts, want 20 after 2", v, calls.Load())
	}
}

// Scrapes arriving while a count runs wait for it instead of starting their
// own.
func TestQuarantinedScrapesShareTheCountInFlight(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var calls atomic.Int64
	release := make(chan struct{})
	m := New()
	c := m.watchQuarantined(func(ctx context.Context) (int64, error) {
		calls.Add(1)
		select {
		case <-release:
			return 3, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}, clock.Now)

	const scrapes = 16
	var wg sync.WaitGroup
	values := make([]float64, scrapes)
	for i := range scrapes {
		wg.Go(func() { values[i], _ = quarantined(t, m) })
	}
	sharing := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.sharing
	}
	if !wait.Until(10*time.Second, func() bool { return calls.Load() == 1 && sharing() == scrapes-1 }) {
		t.Errorf("want 1 count and %d scrapes waiting on it, have %d counts and %d waiting", scrapes-1, calls.Load(), sharing())
	}
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d concurrent scrapes ran %d counts, want 1", scrapes, n)
	}
	for i, v := range values {
		if v != 3 {
			t.Fatalf("scrape %d saw %v, want 3", i, v)
		}
	}
}

// A failed count leaves the gauge out, and is not retried by every scrape
// while the ledger is down.
func TestQuarantinedFailureLeftOutUntilNextCount(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var calls atomic.Int64
	var up atomic.Bool
	m := New()
	m.watchQuarantined(func(context.Context) (int64, error) {
		calls.Add(1)
		if !up.Load() {
			return 0, errors.New("ledger unavailable")
		}
		return 7, nil
	}, clock.Now)

	for range 10 {
		if v, ok := quarantined(t, m); ok {
			t.Fatalf("a failed count reported %v", v)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("10 scrapes with the ledger down ran %d counts, want 1", n)
	}
	up.Store(true)
	clock.Advance(quarantinedEvery)
	if v, ok := quarantined(t, m); !ok || v != 7 {
		t.Fatalf("after recovery: %v %v, want 7", v, ok)
	}
}

func TestQuarantinedHelpSaysHowOften(t *testing.T) {
	m := New()
	m.WatchQuarantined(func(context.Context) (int64, error) { return 0, nil })
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "countersign_quarantined_intents" {
			if want := "counted at most every 5s"; !strings.Contains(f.GetHelp(), want) {
				t.Fatalf("help %q does not say %q", f.GetHelp(), want)
			}
			return
		}
	}
	t.Fatal("countersign_quarantined_intents not exported")
}
