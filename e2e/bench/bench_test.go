package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/results"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/pgproxy"
	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// Knobs (make bench sets none of them; they are for trying things).
//
//	COUNTERSIGN_BENCH=1        run the benchmark (otherwise TestBench skips)
//	BENCH_SECONDS=8            seconds per measured cell and per pgbench run
//	BENCH_RESULTS=RESULTS.md   write the bench section of that file
const (
	spreadAgents = 16  // mandates the spread cells' operations rotate over
	countOps     = 100 // operations per kind in the counting run
	countWarmup  = 40  // unmeasured operations per kind before them
	starts       = 5   // starts of `countersign serve` for memory and start-up time
)

var concurrencies = []int{1, 16, 64}

func TestBench(t *testing.T) {
	if os.Getenv("COUNTERSIGN_BENCH") == "" {
		t.Skip("the benchmark runs under `make bench` (COUNTERSIGN_BENCH=1)")
	}
	cell := 8 * time.Second
	if s := os.Getenv("BENCH_SECONDS"); s != "" {
		n, err := strconv.ParseFloat(s, 64)
		if err != nil || n <= 0 {
			t.Fatalf("BENCH_SECONDS=%q is not a positive number", s)
		}
		cell = time.Duration(n * float64(time.Second))
	}
	began, loadBefore := time.Now(), loadAverage()
	r := newRig(t)

	// 1. What one decision costs, at one caller, through a counting proxy.
	commits0, rollbacks0 := r.xacts()
	px, proxied := r.proxy()
	counting := r.serve(serveOptions{dbURL: proxied, quiet: true})
	var spread []agent
	for i := range spreadAgents {
		spread = append(spread, r.newAgent(counting, fmt.Sprintf("refund-bot-%d", i)))
	}
	hot := r.newAgent(counting, "refund-bot-hot")
	counts := r.count(counting, px, spread, hot)
	wireAll := px.Counts()
	counting.stop()
	commits1, rollbacks1 := r.xacts()
	counts.statDB = [2]int64{commits1 - commits0, rollbacks1 - rollbacks0}
	counts.wireAll = wireAll

	// 2. Idle memory and start-up time of the process.
	var proc processFigures
	for range starts {
		p := r.serve(serveOptions{dbURL: r.dbURL})
		proc.ready = append(proc.ready, p.startedToReady)
		var peak int64
		// Idle for a second after ready: the largest VmRSS seen.
		wait.Until(time.Second, func() bool {
			if v, err := p.rss(); err == nil && v > peak {
				peak = v
			}
			return false
		})
		proc.rss = append(proc.rss, peak)
		p.stop()
	}

	// 3. Throughput and latency beside the floor, concurrency by concurrency,
	// without the statement statistics the counts above needed: with
	// track=all every statement, a trigger's included, pays for them, which
	// a deployment does not.
	r.trackStatements(context.Background(), "none")
	load := r.serve(serveOptions{dbURL: r.dbURL})
	c := newClient(load)
	pick := func(hotMandate bool) func(i int) agent {
		if hotMandate {
			return func(int) agent { return hot }
		}
		return func(i int) agent { return spread[i%len(spread)] }
	}
	allowOp := func(hotMandate bool) op {
		who := pick(hotMandate)
		return func(ctx context.Context, lane, i int) (timing, error) { return c.allow(ctx, lane, i, who(i), hooks{}) }
	}
	blockOp := func(hotMandate bool) op {
		who := pick(hotMandate)
		return func(ctx context.Context, lane, i int) (timing, error) { return c.block(ctx, lane, i, who(i)) }
	}
	// The protocol floor's server, and its own client.
	nullProc := r.null()
	nc := newClient(nullProc)
	nullOp := func(ctx context.Context, lane, i int) (timing, error) {
		return nc.allow(ctx, lane, i, spread[0], hooks{})
	}
	// Warm the pool and the caches once, at the widest concurrency.
	warm := drive(64, time.Second, r.payments(3000, 100000), 3000, allowOp(false))
	if warm.errors > 0 {
		t.Fatalf("warm-up: %d errors, first: %v", warm.errors, warm.firstErr)
	}
	allowed := 0
	var floors []floorResult
	var cells []cellResult
	// Payments for each cell are made beforehand, four times what the
	// fastest cell of its kind so far would use (a cell that runs out ends
	// early, and says so).
	best := map[string]float64{"ALLOW": 1000, "BLOCK": 1000, "NULL": 5000}
	for _, n := range concurrencies {
		f := r.floor(n, cell)
		floors = append(floors, f)
		// The protocol floor at n callers (its operations name no payment
		// the rail has: nothing reads them).
		limit := max(2000, int(4*best["NULL"]*cell.Seconds()))
		nf := drive(n, cell, 1<<30, limit, nullOp)
		nf.kind, nf.floorPerSecond, nf.capped = "NULL", f.tps, nf.ops == limit
		best["NULL"] = max(best["NULL"], nf.perSecond)
		cells = append(cells, nf)
		if nf.errors > 0 {
			t.Errorf("protocol floor, %s: %d of %d operations failed; first: %v", callersText(n), nf.errors, nf.ops, nf.firstErr)
		}
		t.Logf("protocol floor, %s: %d operations, %.0f/s, Check p50 %s, whole p50 %s", callersText(n), nf.ops, nf.perSecond, ms(nf.check.p50), ms(nf.whole.p50))
		for _, kind := range []string{"ALLOW", "BLOCK"} {
			for _, hotMandate := range []bool{false, true} {
				limit := max(2000, int(4*best[kind]*cell.Seconds()))
				var res cellResult
				if kind == "ALLOW" {
					res = drive(n, cell, r.payments(limit, 100000), limit, allowOp(hotMandate))
					allowed += res.ops
				} else {
					res = drive(n, cell, r.payments(limit, 1000000), limit, blockOp(hotMandate))
				}
				res.kind, res.hot, res.floorPerSecond, res.capped = kind, hotMandate, f.tps, res.ops == limit
				best[kind] = max(best[kind], res.perSecond)
				cells = append(cells, res)
				if res.errors > 0 {
					t.Errorf("%s, %s, %s: %d of %d operations failed; first: %v", kind, mandates(hotMandate), callersText(n), res.errors, res.ops, res.firstErr)
				}
				t.Logf("%s, %s, %s: %d operations, %.0f/s, Check p50 %s p99 %s", kind, mandates(hotMandate), callersText(n), res.ops, res.perSecond, ms(res.check.p50), ms(res.check.p99))
			}
		}
	}
	// Every ALLOW committed the rail's answer: its intent is APPLIED.
	applied := r.countIntents(load, countersignv1.IntentState_INTENT_STATE_APPLIED)
	if want := warm.ops + allowed + counts.allowOps; applied != want {
		t.Errorf("the ledger holds %d APPLIED intents; the run made %d ALLOWs", applied, want)
	}
	load.stop()
	nullProc.stop()

	rep := report{
		date: began.UTC().Format("2006-01-02"), machine: machine(r.pgVersion), took: time.Since(began).Round(time.Second), loadBefore: loadBefore,
		cell: cell, floors: floors, cells: cells, counts: counts, proc: proc,
		applied: applied,
	}
	text := rep.markdown()
	fmt.Println(text)
	if path := os.Getenv("BENCH_RESULTS"); path != "" {
		if err := results.WriteSection(path, "bench", text); err != nil {
			t.Fatal(err)
		}
	}
}

func mandates(hot bool) string {
	if hot {
		return "one hot mandate"
	}
	return fmt.Sprintf("%d mandates", spreadAgents)
}

// trackStatements sets pg_stat_statements.track for the ledger's
// connections opened from now on (a setting of the database: the cluster's
// is on its command line, which a database's setting outranks), and checks
// that a new connection has it.
func (r *rig) trackStatements(ctx context.Context, track string) {
	r.t.Helper()
	if _, err := r.admin.Exec(ctx, `ALTER DATABASE countersign SET pg_stat_statements.track = '`+track+`'`); err != nil {
		r.t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, r.dbURL)
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.Close(ctx)
	var got string
	if err := c.QueryRow(ctx, `SHOW pg_stat_statements.track`).Scan(&got); err != nil || got != track {
		r.t.Fatalf("pg_stat_statements.track is %q (%v), not %q, on a new ledger connection", got, err, track)
	}
}

// newRig builds the binary, starts PostgreSQL with pg_stat_statements and
// the mock rail, migrates the ledger and bootstraps an owner holding the
// rail account.
func newRig(t *testing.T) *rig {
	dir, err := os.MkdirTemp("", "cs-bench-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	r := &rig{t: t, dir: dir, bin: filepath.Join(dir, "countersign")}
	build := exec.Command("go", "build", "-o", r.bin, "../../cmd/countersign")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := pgtest.StartCluster(ctx, pgtest.ClusterOptions{Settings: map[string]string{
		"shared_preload_libraries": "pg_stat_statements",
		// Statements run by triggers and functions count too.
		"pg_stat_statements.track": "all",
		"pg_stat_statements.max":   "10000",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Errorf("close cluster: %v", err)
		}
	})
	for _, db := range []string{"countersign", "floor"} {
		if err := cl.CreateDatabase(ctx, db, ""); err != nil {
			t.Fatal(err)
		}
	}
	r.dbURL, r.floorURL = cl.URL("countersign"), cl.URL("floor")
	r.pgAddr = "127.0.0.1:" + strconv.Itoa(cl.Port())
	// The statistics are read from another database, so reading them is
	// not counted as the ledger's work.
	if r.admin, err = pgx.Connect(ctx, cl.URL("postgres")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.admin.Close(context.Background()) })
	if _, err := r.admin.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Fatal(err)
	}
	if err := r.admin.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = 'countersign'`).Scan(&r.dbOID); err != nil {
		t.Fatal(err)
	}
	if err := r.admin.QueryRow(ctx, `SHOW server_version`).Scan(&r.pgVersion); err != nil {
		t.Fatal(err)
	}
	r.pgVersion = strings.Fields(r.pgVersion)[0]

	r.run("migrate", "--database-url", r.dbURL)
	var railURL string
	r.mock, railURL = startMockRail(t)
	r.rails = r.writeFile("rails.yaml", fmt.Sprintf("rails:\n  - account: %s\n    rail: stripe\n    hosts: [api.stripe.com]\n    base_url: %s\n    key_file: %s\n",
		railAccount, railURL, r.writeFile("stripe.key", mockrail.DefaultStripeKey)))
	boot := strings.Split(strings.TrimSpace(r.run("owner", "bootstrap", "--name", "bench", "--database-url", r.dbURL)), "\n")
	if f := strings.Fields(boot[0]); len(f) < 2 || f[0] != "owner" {
		t.Fatalf("owner bootstrap printed %q", boot)
	} else {
		r.ownerID = f[1]
	}
	r.token = boot[len(boot)-1]
	r.run("owner", "grant-account", railAccount, r.ownerID, "--database-url", r.dbURL)
	return r
}

// floorResult is pgbench's single-row commit at one client count.
type floorResult struct {
	clients int
	tps     float64
	avg     time.Duration
}

var (
	tpsRE = regexp.MustCompile(`tps = ([0-9.]+)`)
	latRE = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
)

// floor runs pgbench on its own database of the same cluster: one
// single-row INSERT per transaction, synchronous_commit on.
func (r *rig) floor(clients int, d time.Duration) floorResult {
	t := r.t
	t.Helper()
	bindir, err := pgtest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.floorURL)
	if err != nil {
		t.Fatal(err)
	}
	// The floor's own table: benchmark scaffolding, not ledger SQL.
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS commit_floor (id bigserial PRIMARY KEY, v int NOT NULL)`)
	_ = conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(r.dir, "floor.sql")
	if err := os.WriteFile(script, []byte("INSERT INTO commit_floor (v) VALUES (1);\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// At least two seconds: on a busy machine 64 clients can take a whole
	// second to connect, and a run that committed nothing measured
	// nothing; it is run again, twice as long, up to twice.
	secs := max(int(d.Round(time.Second).Seconds()), 2)
	for try := 1; ; try++ {
		out, err := exec.Command(filepath.Join(bindir, "pgbench"), "-n", "-f", script, "-c", strconv.Itoa(clients),
			"-j", strconv.Itoa(min(clients, runtime.NumCPU())), "-T", strconv.Itoa(secs), r.floorURL).CombinedOutput()
		if err != nil {
			t.Fatalf("pgbench: %v\n%s", err, out)
		}
		if none.Match(out) && try < 3 {
			secs *= 2
			continue
		}
		tps, lat := tpsRE.FindSubmatch(out), latRE.FindSubmatch(out)
		if tps == nil || lat == nil {
			t.Fatalf("pgbench output not understood:\n%s", out)
		}
		f := floorResult{clients: clients}
		f.tps, _ = strconv.ParseFloat(string(tps[1]), 64)
		l, _ := strconv.ParseFloat(string(lat[1]), 64)
		f.avg = time.Duration(l * float64(time.Millisecond))
		return f
	}
}

// none matches a pgbench run that committed nothing.
var none = regexp.MustCompile(`number of transactions actually processed: 0\b`)

// phaseCost is the database's and the wire's work in one phase of one
// kind of operation, summed over the counted operations.
type phaseCost struct {
	db   dbWork
	wire pgproxy.Counts
}

func (p phaseCost) add(o phaseCost) phaseCost {
	w := p.wire
	w.RoundTrips += o.wire.RoundTrips
	w.Commits += o.wire.Commits
	w.Rollbacks += o.wire.Rollbacks
	w.Conns += o.wire.Conns
	w.Unparsed += o.wire.Unparsed
	return phaseCost{db: p.db.add(o.db), wire: w}
}

// kindCost is one kind of operation under one kind of mandate.
type kindCost struct {
	name          string
	ops           int
	check, commit phaseCost // before the Check answer; the ext_proc exchange
}

// countFigures is the counting run's result.
type countFigures struct {
	kinds              []kindCost
	allowOps, blockOps int
	statDB             [2]int64 // pg_stat_database commits, rollbacks over the counting server's life
	wireAll            pgproxy.Counts
}

// count runs countOps operations of each kind, one at a time, snapshotting
// the database's statistics and the proxy's counters between phases.
func (r *rig) count(p *serveProc, px *pgproxy.Proxy, spread []agent, hot agent) countFigures {
	t := r.t
	c := newClient(p)
	var out countFigures
	ctx := context.Background()
	type snapshot struct {
		db   dbSnap
		wire pgproxy.Counts
	}
	take := func() snapshot { return snapshot{r.snap(), px.Counts()} }
	cost := func(a, b snapshot) phaseCost { return phaseCost{db: b.db.since(a.db), wire: b.wire.Sub(a.wire)} }
	for _, kind := range []struct {
		name  string
		allow bool
		who   func(i int) agent
	}{
		{"ALLOW, " + mandates(false), true, func(i int) agent { return spread[i%len(spread)] }},
		{"ALLOW, " + mandates(true), true, func(int) agent { return hot }},
		{"BLOCK, " + mandates(false), false, func(i int) agent { return spread[i%len(spread)] }},
		{"BLOCK, " + mandates(true), false, func(int) agent { return hot }},
	} {
		amount := int64(100000)
		if !kind.allow {
			amount = 1000000
		}
		// A few unmeasured operations first: every statement prepared on
		// every pooled connection this path uses.
		first := r.payments(countWarmup+countOps, amount)
		kc := kindCost{name: kind.name, ops: countOps}
		for k := range countWarmup + countOps {
			i := first + k
			before := take()
			var mid snapshot
			var err error
			if kind.allow {
				_, err = c.allow(ctx, 0, i, kind.who(i), hooks{afterCheck: func() { mid = take() }})
			} else {
				_, err = c.block(ctx, 0, i, kind.who(i))
				mid = take()
			}
			if err != nil {
				t.Fatalf("counting run, %s: %v\n%s", kind.name, err, p.out.String())
			}
			end := mid
			if kind.allow {
				end = take()
			}
			if k < countWarmup {
				continue
			}
			kc.check = kc.check.add(cost(before, mid))
			kc.commit = kc.commit.add(cost(mid, end))
		}
		if kind.allow {
			out.allowOps += countWarmup + countOps
		} else {
			out.blockOps += countWarmup + countOps
		}
		out.kinds = append(out.kinds, kc)
	}
	return out
}

// processFigures are the starts of `countersign serve`.
type processFigures struct {
	ready []time.Duration
	rss   []int64
}

func numCPU() int       { return runtime.NumCPU() }
func goVersion() string { return runtime.Version() }
