package sim

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/results"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

var (
	flagSeeds   = flag.Int("sim.seeds", seedsDefault(), "how many seeds TestSimulation runs (default $COUNTERSIGN_SIM_SEEDS, else 300)")
	flagFirst   = flag.Uint64("sim.first", 1, "the first seed TestSimulation runs")
	flagSeed    = flag.Uint64("sim.seed", 0, "run only this seed and print its whole trace")
	flagWorkers = flag.Int("sim.workers", runtime.GOMAXPROCS(0), "seeds run at once (each worker has its own database)")
	flagTrace   = flag.String("sim.trace", "", "write the trace of the first failing seed to this file")
	flagResults = flag.String("sim.results", os.Getenv("SIM_RESULTS"), "write the run's section of this RESULTS.md (default $SIM_RESULTS)")
)

// seedsDefault lets `make test` size the run without a flag that other
// packages' test binaries would refuse.
func seedsDefault() int {
	if n, err := strconv.Atoi(os.Getenv("COUNTERSIGN_SIM_SEEDS")); err == nil && n > 0 {
		return n
	}
	return 300
}

func TestMain(m *testing.M) { pgtest.Main(m, prepare) }

// prepare builds the template: the fake clock first, so that every
// DEFAULT now() the migrations create reads it, then the schema.
func prepare(ctx context.Context, url string) error {
	if err := pgtest.InstallFakeClock(ctx, url, epoch); err != nil {
		return err
	}
	fake, err := pgtest.FakeClockURL(url)
	if err != nil {
		return err
	}
	_, err = ledger.Migrate(ctx, fake, nil)
	return err
}

// newEnv gives a worker its own database with the fake clock.
func newEnv(t *testing.T) Env {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	fake, err := pgtest.FakeClockURL(url)
	if err != nil {
		t.Fatal(err)
	}
	store, err := ledger.Open(ctx, fake, ledger.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	clock, err := pgtest.OpenFakeClock(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clock.Close(context.Background()) })
	dir := t.TempDir()
	env := Env{Store: store, Clock: clock, StripeKeyFile: filepath.Join(dir, "stripe.key"), RazorpayKeyFile: filepath.Join(dir, "razorpay.key")}
	for file, key := range map[string]string{env.StripeKeyFile: mockrail.DefaultStripeKey,
		env.RazorpayKeyFile: mockrail.DefaultRazorpayKeyID + ":" + mockrail.DefaultRazorpayKeySecret} {
		if err := os.WriteFile(file, []byte(key), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return env
}

// runSeeds runs seeds over workers, each on its own database, and returns
// the results in seed order.
func runSeeds(t *testing.T, cfg Config, seeds []uint64, workers int) []Result {
	t.Helper()
	envs := make([]Env, max(1, min(workers, len(seeds))))
	for i := range envs {
		envs[i] = newEnv(t)
	}
	results := make([]Result, len(seeds))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, env := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, err := Run(context.Background(), env, cfg, seeds[i])
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("seed %d: %w", seeds[i], err))
					mu.Unlock()
				}
				results[i] = r
			}
		}()
	}
	for i := range seeds {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	return results
}

func replayCommand(seed uint64) string {
	return fmt.Sprintf("go test ./internal/sim/ -run 'TestSimulation$' -sim.seed=%d -v", seed)
}

// TestSimulation runs -sim.seeds seeds (or only -sim.seed, printing its
// trace) and fails on the first seed whose invariants fail, with the
// command that replays it.
func TestSimulation(t *testing.T) {
	cfg := Defaults()
	seeds := []uint64{*flagSeed}
	if *flagSeed == 0 {
		seeds = seeds[:0]
		for i := range *flagSeeds {
			seeds = append(seeds, *flagFirst+uint64(i))
		}
	}
	start := time.Now()
	results := runSeeds(t, cfg, seeds, *flagWorkers)
	elapsed := time.Since(start)
	var total Stats
	total.Faults, total.Rails = map[string]int{}, map[string]int{}
	failed := 0
	for _, r := range results {
		add(&total, r.Stats)
		if *flagSeed != 0 {
			t.Logf("trace of seed %d:\n%s", r.Seed, strings.Join(r.Trace, "\n"))
		}
		if !r.Failed() {
			continue
		}
		failed++
		t.Logf("seed %d fails: %s", r.Seed, r.Violations[0])
		if failed > 3 {
			continue
		}
		tail := r.Trace[max(0, len(r.Trace)-40):]
		t.Errorf("seed %d: %s\nreplay: %s\nlast events:\n%s", r.Seed, strings.Join(r.Violations, "; "), replayCommand(r.Seed), strings.Join(tail, "\n"))
		if *flagTrace != "" && failed == 1 {
			if err := os.WriteFile(*flagTrace, []byte(strings.Join(r.Trace, "\n")+"\n"), 0o644); err != nil { //nolint:gosec // a trace for the developer
				t.Error(err)
			}
		}
	}
	t.Logf("%d seeds (%d failed) in %s over %d workers: %d events, %d tasks, %d requests, %d rail effects, %d applied, %d refused, %d gave up; "+
		"%d crashes (%d mid-pagination, %d outages past a day), %d refunds made at the rail (%d times between two listing pages), deepest listing %d pages, "+
		"%d intents retried after an attempt, %d quarantined, %d full refunds applied; rails %v; faults %v",
		len(seeds), failed, elapsed.Round(time.Millisecond), *flagWorkers, total.Events, total.Tasks, total.Requests, total.Effects,
		total.Applied, total.Refused, total.GaveUp, total.Crashes, total.MidPageCrashes, total.LongOutages, total.BurstRefunds,
		total.InsertsBetweenPages, total.MaxPages, total.Reopened, total.Quarantined, total.FullRefunds, total.Rails, total.Faults)
	if *flagResults != "" && *flagSeed == 0 {
		writeResults(t, *flagResults, len(seeds), failed, elapsed, total)
	}
	if len(seeds) >= 100 {
		// The run must have exercised what it claims to: otherwise a
		// change to the generator could make every seed trivially pass.
		for what, n := range map[string]int{"crashes": total.Crashes, "mid-pagination crashes": total.MidPageCrashes,
			"outages past a day": total.LongOutages, "listings of 3+ pages": boolCount(total.MaxPages >= 3),
			"timeouts after apply": total.Faults["timeout_after_apply"], "5xx after apply": total.Faults["5xx_after_apply"],
			"resets before apply": total.Faults["reset_before_apply"], "replayed other bodies": total.Faults["replay_other"],
			"intents retried after an attempt": total.Reopened, "refunds between listing pages": total.InsertsBetweenPages,
			"stripe seeds": total.Rails["stripe"], "razorpay seeds": total.Rails["razorpay"], "full refunds applied": total.FullRefunds} {
			if n == 0 {
				t.Errorf("%d seeds exercised no %s", len(seeds), what)
			}
		}
	}
}

func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}

func add(t *Stats, s Stats) {
	t.Events += s.Events
	t.Tasks += s.Tasks
	t.Requests += s.Requests
	t.Crashes += s.Crashes
	t.MidPageCrashes += s.MidPageCrashes
	t.LongOutages += s.LongOutages
	t.Applied += s.Applied
	t.Refused += s.Refused
	t.GaveUp += s.GaveUp
	t.Effects += s.Effects
	t.Reopened += s.Reopened
	t.Quarantined += s.Quarantined
	t.BurstRefunds += s.BurstRefunds
	t.FullRefunds += s.FullRefunds
	t.MaxPages = max(t.MaxPages, s.MaxPages)
	t.InsertsBetweenPages += s.InsertsBetweenPages
	for k, v := range s.Faults {
		t.Faults[k] += v
	}
	for k, v := range s.Rails {
		t.Rails[k] += v
	}
}

// TestSeedReplaysExactly runs seeds twice — on different databases, after
// different seeds — and compares their traces event by event.
func TestSeedReplaysExactly(t *testing.T) {
	seeds := []uint64{3, 17, 29, 41, 58, 77, 90, 123}
	first := runSeeds(t, Defaults(), seeds, 2)
	rev := make([]uint64, len(seeds))
	for i, s := range seeds {
		rev[len(seeds)-1-i] = s
	}
	second := runSeeds(t, Defaults(), rev, 1)
	for i, a := range first {
		b := second[len(seeds)-1-i]
		if len(a.Trace) < 5 {
			t.Fatalf("seed %d: a trace of %d lines exercises nothing", a.Seed, len(a.Trace))
		}
		if len(a.Trace) != len(b.Trace) {
			t.Errorf("seed %d: %d events, then %d", a.Seed, len(a.Trace), len(b.Trace))
		}
		for k := range min(len(a.Trace), len(b.Trace)) {
			if a.Trace[k] != b.Trace[k] {
				t.Errorf("seed %d diverges at line %d:\n  %s\n  %s", a.Seed, k+1, a.Trace[k], b.Trace[k])
				break
			}
		}
	}
}

// TestSimulationCatchesTruncatedListings breaks the rail client on purpose
// (every listing page claims to be the last, which is what a reconciler
// that stops paging does) and requires the simulation to report a double
// effect with a seed that replays to the same violation. A simulation
// that stopped finding bugs would fail here.
func TestSimulationCatchesTruncatedListings(t *testing.T) {
	cfg := Defaults()
	cfg.TruncateListings, cfg.Rail = true, "stripe"
	env := newEnv(t)
	for seed := uint64(1); seed <= 600; seed++ {
		r, err := Run(context.Background(), env, cfg, seed)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Failed() || !strings.HasPrefix(r.Violations[0], "double effect") {
			continue
		}
		again, err := Run(context.Background(), newEnv(t), cfg, seed)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(again.Trace, "\n") != strings.Join(r.Trace, "\n") {
			t.Fatalf("seed %d did not replay: %d then %d events", seed, len(r.Trace), len(again.Trace))
		}
		t.Logf("seed %d: %s (replayed identically, %d events)", seed, r.Violations[0], len(r.Trace))
		return
	}
	t.Fatal("600 seeds with truncated listings found no double effect")
}

// writeResults writes the simulation's section of RESULTS.md.
func writeResults(t *testing.T, path string, seeds, failed int, elapsed time.Duration, s Stats) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "## Deterministic simulation\n\nMachine-written by `make sim SEEDS=%d` on %s (%d workers, %s). "+
		"Each seed runs the engine, reconciler and ledger on a fake clock against the in-process mock rail, with crashes, "+
		"faults, outages and agent retries drawn from the seed; the invariants are checked after every event.\n\n",
		seeds, time.Now().UTC().Format("2006-01-02"), *flagWorkers, elapsed.Round(time.Second))
	b.WriteString("| | |\n|---|---|\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("seeds (Stripe / Razorpay)", fmt.Sprintf("%d (%d / %d)", seeds, s.Rails["stripe"], s.Rails["razorpay"]))
	row("seeds with a violation", failed)
	row("events (each followed by the invariant checks)", s.Events)
	row("agent tasks / requests", fmt.Sprintf("%d / %d", s.Tasks, s.Requests))
	row("rail effects through Countersign", s.Effects)
	row("tasks applied / refused / gave up", fmt.Sprintf("%d / %d / %d", s.Applied, s.Refused, s.GaveUp))
	row("crashes (mid-pagination / outages past a day)", fmt.Sprintf("%d (%d / %d)", s.Crashes, s.MidPageCrashes, s.LongOutages))
	row("rail faults on money calls", fmt.Sprintf("timeout after apply %d, reset before apply %d, 5xx after apply %d, another entity's body %d",
		s.Faults["timeout_after_apply"], s.Faults["reset_before_apply"], s.Faults["5xx_after_apply"], s.Faults["replay_other"]))
	row("refunds made straight at the rail (between two listing pages)", fmt.Sprintf("%d (%d)", s.BurstRefunds, s.InsertsBetweenPages))
	row("deepest listing", fmt.Sprintf("%d pages", s.MaxPages))
	row("intents retried after an attempt / quarantined", fmt.Sprintf("%d / %d", s.Reopened, s.Quarantined))
	row("full refunds applied (each moved what its intent held)", s.FullRefunds)
	if err := results.WriteSection(path, "simulation", b.String()); err != nil {
		t.Error(err)
	}
}
