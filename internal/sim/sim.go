package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/extproc"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/metrics"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/reconcile"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// Config tunes the simulation. [Defaults] is what CI runs.
type Config struct {
	// MaxTasks bounds the agent tasks of one seed (each seed picks 1..MaxTasks).
	MaxTasks int
	// LeaseTTL, ReconcileDelay, ClaimTTL, MaxReconciles and PassInterval
	// are the engine's and reconciler's settings.
	LeaseTTL       time.Duration
	ReconcileDelay time.Duration
	ClaimTTL       time.Duration
	MaxReconciles  int
	PassInterval   time.Duration
	// CrashProb is the chance that the process crashes just before any
	// step it runs (a request step or a reconcile pass).
	CrashProb float64
	// MidPageCrashProb is the chance that the process crashes before each
	// listing request of a reconcile pass after its first (between two
	// pages, or between two intents' listings).
	MidPageCrashProb float64
	// InsertBetweenPagesProb is the chance that a burst of refunds lands
	// on the listed payment just before a listing page after the first is
	// served (new entities enter at the head of newest-first lists, which
	// shifts offset pages).
	InsertBetweenPagesProb float64
	// MaxTries is how many times an agent sends one request.
	MaxTries int
	// MaxEvents ends a seed that does not settle (a liveness violation).
	MaxEvents int
	// Rail, when set ("stripe" or "razorpay"), is every seed's rail;
	// otherwise each seed picks one.
	Rail string
	// TruncateListings breaks the rail client on purpose: every Stripe
	// listing page says it is the last, so absence is "proven" on page 1.
	// Only the test that shows the simulation catches that bug sets it.
	TruncateListings bool
}

// Defaults is the configuration CI runs.
func Defaults() Config {
	return Config{
		MaxTasks: 6, LeaseTTL: 10 * time.Second, ReconcileDelay: 5 * time.Second, ClaimTTL: 30 * time.Second,
		MaxReconciles: 6, PassInterval: 2 * time.Second, CrashProb: 0.02, MidPageCrashProb: 0.2,
		InsertBetweenPagesProb: 0.3, MaxTries: 8, MaxEvents: 5000,
	}
}

// Bound is how long (in the process's up time) an attempt may stay
// unsettled — IN_FLIGHT, UNKNOWN or RECONCILING — before the invariant
// fails: its lease, the first reconcile delay, every backoff before
// quarantine, and a lapsed claim and a pass interval for each try.
func (c Config) Bound() time.Duration {
	b := c.LeaseTTL + c.ReconcileDelay
	d := max(c.ReconcileDelay, time.Second)
	for range c.MaxReconciles {
		b += min(d, 5*time.Minute) + c.ClaimTTL + c.PassInterval
		d *= 2
	}
	return b + c.ClaimTTL + c.PassInterval
}

// Env is what the seeds run by one worker share: a ledger whose now() is
// the fake clock, the clock's handle, and the files holding the rail keys
// (mockrail's default Stripe key; its default Razorpay key_id:key_secret).
type Env struct {
	Store           *ledger.Store
	Clock           *pgtest.FakeClock
	StripeKeyFile   string
	RazorpayKeyFile string
}

// Result is one seed's run.
type Result struct {
	Seed uint64
	// Trace is one line per event, identical for every run of the seed.
	Trace []string
	// Violations are the invariants that failed, at the first event where
	// any did; empty when the seed passed.
	Violations []string
	Stats      Stats
}

// Failed reports whether an invariant failed.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

// Stats count what a seed exercised.
type Stats struct {
	Events, Tasks, Requests, Crashes, MidPageCrashes, LongOutages int
	Faults                                                        map[string]int
	Applied, Refused, GaveUp, Effects, Reopened, Quarantined      int
	BurstRefunds, MaxPages, InsertsBetweenPages                   int
	// FullRefunds are the full refunds (no amount) that ended APPLIED,
	// each for what its intent held.
	FullRefunds int
	Rails       map[string]int
}

// epoch is the simulated start of every seed.
var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// railSpec is what the simulation needs to speak one rail.
type railSpec struct {
	name     string // rails-file rail
	host     string
	currency string // the mandate's
	payment  string // payment id prefix
	mandate  countersignv1.Rail
	key      func(Env) string
}

var (
	stripeRail = railSpec{name: "stripe", host: "api.stripe.com", currency: "USD", payment: "pi_sim",
		mandate: countersignv1.Rail_RAIL_STRIPE, key: func(e Env) string { return e.StripeKeyFile }}
	razorpayRail = railSpec{name: "razorpay", host: "api.razorpay.com", currency: "INR", payment: "pay_sim",
		mandate: countersignv1.Rail_RAIL_RAZORPAY, key: func(e Env) string { return e.RazorpayKeyFile }}
)

// refundRequest is an agent's refund of amount on payment, as the rail's
// SDK sends it; amount 0 is a full refund (no amount: a Razorpay one with
// no body at all).
func (r railSpec) refundRequest(payment string, amount int64) (path, contentType string, body []byte) {
	if r.name == "razorpay" {
		if amount == 0 {
			return "/v1/payments/" + payment + "/refund", "application/json", nil
		}
		return "/v1/payments/" + payment + "/refund", "application/json", fmt.Appendf(nil, `{"amount":%d}`, amount)
	}
	form := url.Values{"payment_intent": {payment}}
	if amount != 0 {
		form.Set("amount", strconv.FormatInt(amount, 10))
	}
	return "/v1/refunds", "application/x-www-form-urlencoded", []byte(form.Encode())
}

// listedPayment returns the payment a refund listing request is about, or
// "" if req is not one.
func (r railSpec) listedPayment(req *http.Request) string {
	if req.Method != http.MethodGet {
		return ""
	}
	if r.name == "razorpay" {
		rest, ok := strings.CutPrefix(req.URL.Path, "/v1/payments/")
		if id, ok2 := strings.CutSuffix(rest, "/refunds"); ok && ok2 {
			return id
		}
		return ""
	}
	if req.URL.Path == "/v1/refunds" {
		return req.URL.Query().Get("payment_intent")
	}
	return ""
}

// Run simulates one seed. An error means the simulation itself could not
// run (the database failed); invariant failures are in the Result.
func Run(ctx context.Context, env Env, cfg Config, seed uint64) (Result, error) {
	w, err := newWorld(ctx, env, cfg, seed)
	if err != nil {
		return Result{Seed: seed}, err
	}
	defer w.mock.Close()
	err = w.run(ctx)
	w.stats.Events = w.events
	return Result{Seed: seed, Trace: w.trace, Violations: w.violations, Stats: w.stats}, err
}

// task is one thing an agent wants done: one refund, sent until it gets a
// final answer or MaxTries is spent.
type task struct {
	id      int
	payment string
	amount  int64
	tries   int
	done    bool
	outcome string
}

// pipe is one request in flight through the (simulated) Envoy path:
// ext_authz decide → ext_proc stamp → the rail → ext_proc commit → the
// agent. It belongs to one incarnation of the process.
type pipe struct {
	t     *task
	inc   int
	ref   engine.IntentRef
	hdr   map[string]string
	path  string
	ctype string
	body  []byte
	resp  rail.Response
}

type evKind int

const (
	evStart evKind = iota + 1
	evDecide
	evStamp
	evRail
	evCommit
	evAck
	evTick
	evRestart
	evBurst
)

var evNames = map[evKind]string{evStart: "start", evDecide: "decide", evStamp: "stamp", evRail: "rail", evCommit: "commit",
	evAck: "ack", evTick: "tick", evRestart: "restart", evBurst: "burst"}

type event struct {
	at   time.Duration
	seq  int
	kind evKind
	t    *task
	p    *pipe
	inc  int
	n    int // burst size
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type world struct {
	env  Env
	cfg  Config
	seed uint64
	rng  *rand.Rand

	q      queue
	seq    int
	now    time.Duration
	uptime time.Duration
	events int

	up      bool
	inc     int
	ticking bool
	eng     *engine.Engine
	rec     *reconcile.Worker
	// pageReads counts the listing requests of the running pass.
	pageReads  int
	passCancel context.CancelFunc

	rail     railSpec
	account  string
	payments []string
	// fullPay is a small payment the agents' full refunds are of (the
	// others are too large for the mandate's per-action maximum), which
	// refunds straight at the rail now and then shrink.
	fullPay    string
	credential string
	mandate    string
	budget     int64
	mock       *mockrail.Server
	mclock     *mockrail.ManualClock
	reg        *rails.Registry
	lag        time.Duration

	tasks []*task
	pipes map[*pipe]bool
	// names numbers intents by first appearance, for a trace free of
	// random ids.
	names map[string]string
	// unsettled is the up time at which each unsettled attempt was first
	// seen ("sik#attempt").
	unsettled map[string]time.Duration
	nUnsettle int

	trace      []string
	violations []string
	stats      Stats

	// auditSigner seals the account's audit log at every check (the sim
	// runs no sequencer goroutine); auditVerifier checks what it signed.
	auditSigner   note.Signer
	auditVerifier note.Verifier
}

func newWorld(ctx context.Context, env Env, cfg Config, seed uint64) (*world, error) {
	w := &world{env: env, cfg: cfg, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), //nolint:gosec // a seeded simulation, not secrets
		pipes: map[*pipe]bool{}, names: map[string]string{}, unsettled: map[string]time.Duration{},
		stats: Stats{Faults: map[string]int{}, Rails: map[string]int{}}}
	tag := strconv.FormatUint(seed, 36)
	switch cfg.Rail {
	case "stripe":
		w.rail = stripeRail
	case "razorpay":
		w.rail = razorpayRail
	case "":
		w.rail = stripeRail
		if w.rng.IntN(2) == 0 {
			w.rail = razorpayRail
		}
	default:
		return nil, fmt.Errorf("sim: unknown rail %q", cfg.Rail)
	}
	w.stats.Rails[w.rail.name]++
	w.account = "acct_sim_" + tag
	w.payments = []string{w.rail.payment + tag + "a", w.rail.payment + tag + "b"}
	w.mclock = mockrail.NewManualClock(epoch)
	var err error
	w.mock, err = mockrail.New(mockrail.WithClock(w.mclock), mockrail.WithIDs(mockrail.SequentialIDs()),
		mockrail.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return nil, err
	}
	for _, p := range w.payments {
		if _, err := w.mock.AddPayment(mockrail.Payment{Rail: mockrail.Rail(w.rail.name), ID: p, Amount: 1_000_000_000,
			Currency: strings.ToLower(w.rail.currency)}); err != nil {
			return nil, err
		}
	}
	w.fullPay = w.rail.payment + tag + "f"
	if _, err := w.mock.AddPayment(mockrail.Payment{Rail: mockrail.Rail(w.rail.name), ID: w.fullPay, Amount: int64(2000 + w.rng.IntN(8000)),
		Currency: strings.ToLower(w.rail.currency)}); err != nil {
		return nil, err
	}
	// Replica lag on listings, below the reconcile delay (the documented
	// requirement on ReconcileDelay).
	if w.rng.IntN(2) == 0 {
		w.lag = time.Duration(500+w.rng.IntN(int(cfg.ReconcileDelay/time.Millisecond)-1000)) * time.Millisecond
	}
	w.reg, err = rails.New(rails.File{Rails: []rails.AccountConfig{{Account: w.account, Rail: w.rail.name, Hosts: []string{w.rail.host},
		BaseURL: "https://" + w.rail.host, KeyFile: w.rail.key(env)}}},
		rails.Adapters{sik.RailStripe: func() rail.Adapter { return stripe.New() }, sik.RailRazorpay: func() rail.Adapter { return razorpay.New() }},
		&http.Client{Transport: w})
	if err != nil {
		return nil, err
	}
	if err := w.setClock(ctx); err != nil {
		return nil, err
	}
	if err := w.seedLedger(ctx); err != nil {
		return nil, err
	}
	w.plan()
	return w, nil
}

// seedLedger creates the seed's owner, agent, credential and mandate.
func (w *world) seedLedger(ctx context.Context) error {
	st := w.env.Store
	owner, err := st.CreateOwner(ctx, "sim "+w.account)
	if err != nil {
		return err
	}
	agent, err := st.CreateAgent(ctx, owner.ID, "sim agent")
	if err != nil {
		return err
	}
	secret, hash, err := credential.Generate()
	if err != nil {
		return err
	}
	if _, err := st.IssueCredential(ctx, agent.ID, credential.ScopeExecute, epoch.Add(90*24*time.Hour), hash); err != nil {
		return err
	}
	w.credential = secret
	m := &countersignv1.Mandate{
		Rail: w.rail.mandate, RailAccount: w.account, AgentId: agent.ID, Purpose: "simulation",
		ValidFrom: timestamppb.New(epoch.Add(-time.Hour)), ValidUntil: timestamppb.New(epoch.Add(90 * 24 * time.Hour)),
		Mode: countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 1_000_000, Currencies: []string{w.rail.currency}},
		},
	}
	// Half the seeds run under a budget with room for about half of what
	// the agents ask for.
	if w.rng.IntN(2) == 0 {
		w.budget = 2500 + w.rng.Int64N(10_000)
		m.Budgets = []*countersignv1.Money{{AmountMinor: w.budget, Currency: w.rail.currency}}
	}
	rec, err := mandate.Record(m)
	if err != nil {
		return err
	}
	if _, err := st.GrantRailAccount(ctx, w.account, agent.OwnerID); err != nil {
		return err
	}
	if _, err := st.CreateMandate(ctx, rec); err != nil {
		return err
	}
	w.mandate = rec.Hash
	return nil
}

// plan draws the agents' tasks and the rail's background activity.
func (w *world) plan() {
	n := 1 + w.rng.IntN(w.cfg.MaxTasks)
	for i := range n {
		t := &task{id: i + 1}
		if i > 0 && w.rng.IntN(4) == 0 {
			// Two agents decide on the same refund.
			o := w.tasks[w.rng.IntN(len(w.tasks))]
			t.payment, t.amount = o.payment, o.amount
		} else {
			t.payment, t.amount = w.payments[w.rng.IntN(len(w.payments))], int64(100+w.rng.IntN(4900))
			if w.rng.IntN(8) == 0 {
				// A full refund: what is refundable when decided, which is
				// what must leave.
				t.payment, t.amount = w.fullPay, 0
			}
		}
		w.tasks = append(w.tasks, t)
		w.push(&event{at: time.Duration(w.rng.IntN(30_000)) * time.Millisecond, kind: evStart, t: t})
	}
	w.stats.Tasks = n
	// Refunds made straight at the rail (a dashboard, another system):
	// large bursts push an intent's refund past the first listing page.
	if w.rng.IntN(2) == 0 {
		for range 1 + w.rng.IntN(3) {
			size := 1 + w.rng.IntN(20)
			if w.rng.IntN(2) == 0 {
				size = 100 + w.rng.IntN(160)
			}
			w.push(&event{at: time.Duration(w.rng.IntN(180_000)) * time.Millisecond, kind: evBurst, n: size})
		}
	}
	w.up, w.inc = true, 1
	w.boot()
}

func (w *world) push(e *event) {
	w.seq++
	e.seq = w.seq
	heap.Push(&w.q, e)
}

func (w *world) after(d time.Duration, e *event) {
	e.at = w.now + d
	w.push(e)
}

func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%10.3fs %s", w.now.Seconds(), fmt.Sprintf(format, args...)))
}

func (w *world) wallclock() time.Time { return epoch.Add(w.now) }

func (w *world) setClock(ctx context.Context) error {
	w.mclock.Set(w.wallclock())
	return w.env.Clock.Set(ctx, w.wallclock())
}

// boot starts an incarnation of the process: a fresh engine and
// reconciler (nothing survives a crash but the ledger), and a first pass
// at once, as `countersign serve` recovers at boot.
func (w *world) boot() {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	owner := fmt.Sprintf("sim-%d", w.inc)
	w.eng = engine.New(w.env.Store, engine.Options{Rails: w.reg, LeaseOwner: owner, LeaseTTL: w.cfg.LeaseTTL,
		ReconcileDelay: w.cfg.ReconcileDelay, ExtProcInPath: true, Now: w.wallclock}, log, metrics.New())
	w.rec = reconcile.New(w.env.Store, w.reg, reconcile.Options{Owner: owner, ClaimTTL: w.cfg.ClaimTTL,
		Delay: w.cfg.ReconcileDelay, MaxAttempts: w.cfg.MaxReconciles, Batch: 16}, log)
	w.ticking = true
	w.after(0, &event{kind: evTick, inc: w.inc})
}

func (w *world) run(ctx context.Context) error {
	for w.q.Len() > 0 {
		if w.events >= w.cfg.MaxEvents {
			w.violations = append(w.violations, fmt.Sprintf("liveness: the seed did not settle within %d events", w.cfg.MaxEvents))
			return nil
		}
		e := heap.Pop(&w.q).(*event)
		if e.at > w.now {
			if w.up {
				w.uptime += e.at - w.now
			}
			w.now = e.at
			if err := w.setClock(ctx); err != nil {
				return err
			}
		}
		w.events++
		if err := w.step(ctx, e); err != nil {
			return err
		}
		if err := w.check(ctx, false); err != nil {
			return err
		}
		if len(w.violations) > 0 {
			w.logf("VIOLATION %s", strings.Join(w.violations, "; "))
			return nil
		}
		if !w.ticking && w.up && (w.nUnsettle > 0 || len(w.pipes) > 0) {
			w.ticking = true
			w.after(w.cfg.PassInterval, &event{kind: evTick, inc: w.inc})
		}
	}
	if err := w.check(ctx, true); err != nil {
		return err
	}
	if len(w.violations) > 0 {
		w.logf("VIOLATION %s", strings.Join(w.violations, "; "))
	} else {
		w.logf("quiet: %d events, %d effects, every invariant held", w.events, w.stats.Effects)
	}
	return nil
}

// step runs one event.
func (w *world) step(ctx context.Context, e *event) error {
	switch e.kind {
	case evStart:
		w.send(ctx, e.t)
		return nil
	case evBurst:
		w.burst(ctx, e.n)
		return nil
	case evRestart:
		w.up, w.inc = true, w.inc+1
		w.logf("restart: incarnation %d", w.inc)
		w.boot()
		return nil
	}
	// Request steps and passes belong to one incarnation; a crash ends
	// them.
	if e.inc != w.inc || !w.up {
		if e.kind == evTick {
			w.ticking = false
		}
		return nil
	}
	if w.rng.Float64() < w.cfg.CrashProb {
		w.crash(fmt.Sprintf("before %s", evNames[e.kind]))
		if e.kind == evTick {
			w.ticking = false
		}
		return nil
	}
	switch e.kind {
	case evDecide:
		return w.decide(ctx, e.p)
	case evStamp:
		return w.stamp(ctx, e.p)
	case evRail:
		return w.callRail(ctx, e.p)
	case evCommit:
		return w.commit(ctx, e.p)
	case evAck:
		delete(w.pipes, e.p)
		w.answer(e.p.t, e.p.resp.Status, string(e.p.resp.Body), "rail")
	case evTick:
		return w.tick(ctx)
	}
	return nil
}

// send starts one try of t: through Envoy, which fails closed while the
// process is down.
func (w *world) send(_ context.Context, t *task) {
	if t.done {
		return
	}
	t.tries++
	w.stats.Requests++
	if !w.up {
		w.logf("task %d try %d: countersign is down; Envoy answers 503", t.id, t.tries)
		w.retry(t)
		return
	}
	p := &pipe{t: t, inc: w.inc}
	w.pipes[p] = true
	w.after(w.latency(), &event{kind: evDecide, p: p, inc: w.inc})
}

func (w *world) latency() time.Duration {
	return time.Duration(1+w.rng.IntN(40)) * time.Millisecond
}

func (w *world) decide(ctx context.Context, p *pipe) error {
	path, ctype, body := w.rail.refundRequest(p.t.payment, p.t.amount)
	out := w.eng.Decide(ctx, engine.Request{Source: engine.SourceExtAuthz, RequestID: fmt.Sprintf("task%d-try%d", p.t.id, p.t.tries),
		Credential: w.credential, Method: http.MethodPost, Host: w.rail.host, Path: path, RailAccount: w.account,
		Headers: map[string]string{"content-type": ctype}, Body: body})
	name := ""
	if out.Intent != nil {
		name = w.name(out.Intent.SIK)
	}
	if out.Verdict != engine.Allow {
		delete(w.pipes, p)
		w.logf("task %d try %d: decide %s %s %s", p.t.id, p.t.tries, out.Verdict, out.ReasonCode, name)
		w.answer(p.t, out.HTTPStatus, out.ReasonCode, "countersign")
		return nil
	}
	p.ref, p.hdr, p.body, p.path, p.ctype = *out.Intent, out.SetHeaders, body, path, ctype
	w.logf("task %d try %d: decide ALLOW %s attempt %d", p.t.id, p.t.tries, name, p.ref.AttemptSeq)
	w.after(w.latency(), &event{kind: evStamp, p: p, inc: p.inc})
	return nil
}

// stamp is ext_proc's request-body phase: the stamp is recorded before the
// request may leave, then written into the body.
func (w *world) stamp(ctx context.Context, p *pipe) error {
	body, err := extproc.OutgoingBody(p.body, p.ref)
	marked := p.ref
	if err == nil {
		marked, err = w.eng.MarkSent(ctx, p.ref, true)
	}
	if err != nil {
		delete(w.pipes, p)
		w.logf("task %d: stamp failed (%v): the request is stopped", p.t.id, err)
		w.answer(p.t, http.StatusServiceUnavailable, "stamp_failed", "countersign")
		return nil
	}
	p.body, p.ref = body, marked
	w.after(w.latency(), &event{kind: evRail, p: p, inc: p.inc})
	return nil
}

// callRail sends the stamped request to the rail with a fault drawn for
// this call. A transport failure is answered by Envoy (504) without the
// response phase: nothing is committed and the lease expires.
func (w *world) callRail(ctx context.Context, p *pipe) error {
	if p.t.payment == w.fullPay && w.rng.IntN(3) == 0 {
		// The payment moves while the full refund is on its way: what is
		// refundable when it arrives is not what it was valued at.
		w.refundsAtRail(ctx, w.fullPay, 1+w.rng.IntN(3))
	}
	fault := "none"
	switch r := w.rng.IntN(100); {
	case r < 8:
		fault = string(mockrail.FaultTimeoutAfterApply)
	case r < 14:
		fault = string(mockrail.FaultResetBeforeApply)
	case r < 20:
		fault = string(mockrail.Fault5xxAfterApply)
	case r < 25:
		fault = string(mockrail.FaultReplayOther)
	}
	w.stats.Faults[fault]++
	rules := w.lagRules()
	switch fault {
	case string(mockrail.Fault5xxAfterApply), string(mockrail.FaultReplayOther):
		rules = append(rules, mockrail.Fault{Profile: mockrail.Profile(fault), Count: 1, Method: http.MethodPost})
	}
	if err := w.mock.SetFaults(rules...); err != nil {
		return fmt.Errorf("rail faults: %w", err)
	}
	name := w.name(p.ref.SIK)
	if fault == string(mockrail.FaultResetBeforeApply) {
		w.logf("task %d: rail %s reset before apply", p.t.id, name)
		w.lost(p)
		return nil
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "https://"+w.rail.host+p.path, strings.NewReader(string(p.body)))
	for k, v := range p.hdr {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", p.ctype)
	rec := httptest.NewRecorder()
	w.mock.ServeHTTP(rec, req)
	resp := rec.Result()
	body, _ := io.ReadAll(resp.Body)
	if err := w.mock.SetFaults(w.lagRules()...); err != nil {
		return fmt.Errorf("rail faults: %w", err)
	}
	if fault == string(mockrail.FaultTimeoutAfterApply) {
		w.logf("task %d: rail %s answered %d but the answer was lost (timeout)", p.t.id, name, resp.StatusCode)
		w.lost(p)
		return nil
	}
	h := map[string]string{}
	for k := range resp.Header {
		h[strings.ToLower(k)] = resp.Header.Get(k)
	}
	p.resp = rail.Response{Status: resp.StatusCode, Headers: h, Body: body}
	w.logf("task %d: rail %s answered %d (fault %s)", p.t.id, name, resp.StatusCode, fault)
	w.after(w.latency(), &event{kind: evCommit, p: p, inc: p.inc})
	return nil
}

// lost ends a pipe whose rail answer never came: Envoy answers the agent
// 504, ext_proc's response phase never runs.
func (w *world) lost(p *pipe) {
	delete(w.pipes, p)
	w.answer(p.t, http.StatusGatewayTimeout, "upstream timeout", "envoy")
}

func (w *world) lagRules() []mockrail.Fault {
	if w.lag == 0 {
		return nil
	}
	return []mockrail.Fault{{Profile: mockrail.FaultReplicaLag, Delay: mockrail.Duration(w.lag)}}
}

// commit is ext_proc's response phase: the answer is committed before
// Envoy forwards it to the agent.
func (w *world) commit(ctx context.Context, p *pipe) error {
	it, c, err := w.eng.Commit(ctx, p.ref, p.resp)
	if err != nil {
		w.logf("task %d: commit failed (%v); the lease will expire", p.t.id, err)
	} else {
		w.logf("task %d: commit %s → %s %s", p.t.id, w.name(p.ref.SIK), c.Outcome, it.State)
	}
	w.after(w.latency(), &event{kind: evAck, p: p, inc: p.inc})
	return nil
}

// answer is what the agent does with a response: a final one ends the
// task, anything else is retried later.
func (w *world) answer(t *task, status int, what, from string) {
	switch {
	case status >= 200 && status < 300:
		t.done, t.outcome = true, "applied"
		w.stats.Applied++
	case what == engine.ReasonDuplicateApplied:
		t.done, t.outcome = true, "applied"
		w.stats.Applied++
	case what == engine.ReasonQuarantined:
		t.done, t.outcome = true, "quarantined"
		w.stats.GaveUp++
	case status >= 400 && status < 500 && status != http.StatusConflict && status != http.StatusTooManyRequests:
		// Refused (a gate, a rail rejection): final.
		t.done, t.outcome = true, "refused: "+what
		w.stats.Refused++
	default:
		w.retry(t)
		return
	}
	w.logf("task %d: done (%s)", t.id, t.outcome)
}

// retry schedules the next try: mostly soon, sometimes much later, and now
// and then after the rail has forgotten the idempotency key (a day).
func (w *world) retry(t *task) {
	if t.tries >= w.cfg.MaxTries {
		t.done, t.outcome = true, "gave up"
		w.stats.GaveUp++
		w.logf("task %d: gave up after %d tries", t.id, t.tries)
		return
	}
	var d time.Duration
	switch r := w.rng.IntN(100); {
	case r < 60:
		d = time.Duration(500+w.rng.IntN(9500)) * time.Millisecond
	case r < 90:
		d = time.Duration(10+w.rng.IntN(590)) * time.Second
	default:
		d = time.Duration(25*60+w.rng.IntN(23*60)) * time.Minute
	}
	w.after(d, &event{kind: evStart, t: t})
}

// crash ends the incarnation: its requests in flight die where they are
// (the agents see Envoy's 503 and retry), its reconcile claims lapse.
func (w *world) crash(where string) {
	w.stats.Crashes++
	w.up = false
	var down time.Duration
	switch r := w.rng.IntN(100); {
	case r < 75:
		down = time.Duration(1+w.rng.IntN(30)) * time.Second
	case r < 95:
		down = time.Duration(1+w.rng.IntN(20)) * time.Minute
	default:
		down = time.Duration(25+w.rng.IntN(48)) * time.Hour
		w.stats.LongOutages++
	}
	w.logf("CRASH %s; down for %s", where, down)
	dead := make([]*pipe, 0, len(w.pipes))
	for p := range w.pipes {
		dead = append(dead, p)
	}
	slices.SortFunc(dead, func(a, b *pipe) int { return a.t.id - b.t.id })
	for _, p := range dead {
		delete(w.pipes, p)
		w.logf("task %d try %d: connection failed in the crash", p.t.id, p.t.tries)
		w.retry(p.t)
	}
	w.after(down, &event{kind: evRestart})
}

// tick is one reconcile pass; a pass that lists may be cut by a crash
// between two pages.
func (w *world) tick(ctx context.Context) error {
	w.pageReads = 0
	pctx, cancel := context.WithCancel(ctx)
	w.passCancel = cancel
	rep, err := w.rec.Pass(pctx, nil)
	cancel()
	w.passCancel = nil
	if !w.up {
		// Crashed mid-pass: whatever the pass had not recorded is lost.
		w.ticking = false
		return nil
	}
	if err != nil {
		return fmt.Errorf("reconcile pass: %w", err)
	}
	for _, r := range rep.Results {
		w.stats.MaxPages = max(w.stats.MaxPages, r.Pages)
		w.logf("reconcile %s: %s after %d pages → %s", w.name(r.Key.SIK), r.Outcome, r.Pages, r.State)
	}
	if rep.Expired > 0 {
		w.logf("reconcile: %d leases expired", rep.Expired)
	}
	if w.nUnsettle > 0 || len(w.pipes) > 0 {
		w.after(w.cfg.PassInterval, &event{kind: evTick, inc: w.inc})
	} else {
		w.ticking = false
	}
	return nil
}

// RoundTrip serves the rail client's reads (referents, listings) from the
// in-process rail, and crashes the process at the chosen listing page.
func (w *world) RoundTrip(req *http.Request) (*http.Response, error) {
	if !w.up {
		return nil, errors.New("sim: the process is dead")
	}
	if listed := w.rail.listedPayment(req); listed != "" {
		w.pageReads++
		// The first listing request of a pass crashes like any step; a
		// later one (the next page, or the next intent's listing) more
		// often, to cover the reconciler dying mid-pagination.
		p := w.cfg.CrashProb
		if w.pageReads > 1 {
			p = w.cfg.MidPageCrashProb
		}
		if w.rng.Float64() < p {
			w.stats.MidPageCrashes++
			w.crash(fmt.Sprintf("mid-pagination, asking for listing page %d", w.pageReads))
			w.passCancel()
			return nil, errors.New("sim: the process died mid-pagination")
		}
		if w.pageReads > 1 && w.rng.Float64() < w.cfg.InsertBetweenPagesProb {
			n := 1 + w.rng.IntN(95)
			w.stats.InsertsBetweenPages++
			w.logf("%d refunds land on %s between two listing pages", n, listed)
			w.refundsAtRail(req.Context(), listed, n)
		}
	}
	rec := httptest.NewRecorder()
	w.mock.ServeHTTP(rec, req)
	// Every refund listing, the payment's and the account's (the one the
	// reconciler reads before it records an absence).
	if w.cfg.TruncateListings && w.rail.name == "stripe" && req.Method == http.MethodGet && req.URL.Path == "/v1/refunds" {
		body := strings.Replace(rec.Body.String(), `"has_more": true`, `"has_more": false`, 1)
		body = strings.Replace(body, `"has_more":true`, `"has_more":false`, 1)
		rec.Body.Reset()
		rec.Body.WriteString(body)
		rec.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	return rec.Result(), nil
}

// burst makes n small refunds straight at the rail on one payment.
func (w *world) burst(ctx context.Context, n int) {
	p := w.payments[w.rng.IntN(len(w.payments))]
	if n <= 20 && w.rng.IntN(3) == 0 {
		// The full refunds' payment shrinks under them (the large bursts
		// stay on the large payments, whose listings they lengthen).
		p, n = w.fullPay, 1+n%5
	}
	w.refundsAtRail(ctx, p, n)
	w.logf("burst: %d refunds straight at the rail on %s", n, p)
}

// refundsAtRail makes n small refunds on payment p with the rail's own
// key, without Countersign (a dashboard, another system).
func (w *world) refundsAtRail(ctx context.Context, p string, n int) {
	for i := range n {
		path, ctype, body := w.rail.refundRequest(p, int64(1+i%7))
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "https://"+w.rail.host+path, strings.NewReader(string(body)))
		if w.rail.name == "razorpay" {
			req.SetBasicAuth(mockrail.DefaultRazorpayKeyID, mockrail.DefaultRazorpayKeySecret)
		} else {
			req.Header.Set("Authorization", "Bearer "+mockrail.DefaultStripeKey)
		}
		req.Header.Set("Content-Type", ctype)
		rec := httptest.NewRecorder()
		w.mock.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			if p == w.fullPay {
				return // a full refund may have taken it all
			}
			w.violations = append(w.violations, fmt.Sprintf("simulation: a refund made at the rail was refused: %d %s", rec.Code, rec.Body))
			return
		}
	}
	w.stats.BurstRefunds += n
}

// name is the trace's name for an intent.
func (w *world) name(s string) string {
	if n, ok := w.names[s]; ok {
		return n
	}
	n := fmt.Sprintf("i%d", len(w.names)+1)
	w.names[s] = n
	return n
}

// check verifies the invariants after an event; final adds the checks of
// a quiet ledger.
func (w *world) check(ctx context.Context, final bool) error {
	var its []ledger.Intent
	for _, p := range append(slices.Clone(w.payments), w.fullPay) {
		got, err := w.env.Store.IntentsBySubject(ctx, p)
		if err != nil {
			return err
		}
		for _, it := range got {
			if it.RailAccount == w.account {
				its = append(its, it)
			}
		}
	}
	j := w.mock.Journal()
	effects := map[string][]mockrail.Effect{}
	moved, movedApplied := int64(0), int64(0)
	w.stats.Effects = 0
	for _, f := range j.Effects {
		stamp := f.Metadata[sik.StampKey]
		if stamp == "" {
			continue
		}
		s, _, err := sik.ParseStamp(stamp)
		if err != nil {
			w.violations = append(w.violations, fmt.Sprintf("effect %s carries an unparseable stamp %q", f.EntityID, stamp))
			continue
		}
		effects[string(s)] = append(effects[string(s)], f)
		moved += f.Amount
		w.stats.Effects++
	}
	for _, s := range sortedKeys(effects) {
		if fs := effects[s]; len(fs) > 1 {
			w.violations = append(w.violations, fmt.Sprintf("double effect: intent %s has %d rail effects (%s)", w.name(s), len(fs), strings.Join(entityIDs(fs), ", ")))
		}
	}
	w.nUnsettle = 0
	seen := map[string]bool{}
	for _, it := range its {
		name := w.name(it.SIK)
		fs := effects[it.SIK]
		switch it.State {
		case intent.Applied:
			for _, f := range fs {
				movedApplied += f.Amount
			}
			if len(fs) == 0 || fs[0].EntityID != it.RailEntityID {
				w.violations = append(w.violations, fmt.Sprintf("intent %s is APPLIED as %q, which is not its effect at the rail (%v)", name, it.RailEntityID, entityIDs(fs)))
			}
		}
		for _, f := range fs {
			// What left is what the intent holds, a full refund's too.
			if f.Amount != it.AmountMinor {
				w.violations = append(w.violations, fmt.Sprintf("intent %s holds %d, but its effect %s at the rail moved %d", name, it.AmountMinor, f.EntityID, f.Amount))
			}
		}
		switch it.State {
		case intent.InFlight, intent.Unknown, intent.Reconciling:
			w.nUnsettle++
			k := fmt.Sprintf("%s#%d", it.SIK, it.AttemptCount)
			seen[k] = true
			since, ok := w.unsettled[k]
			if !ok {
				w.unsettled[k] = w.uptime
			} else if w.uptime-since > w.cfg.Bound() {
				w.violations = append(w.violations, fmt.Sprintf("intent %s has been %s for %s of up time, past the reconcile bound %s", name, it.State, w.uptime-since, w.cfg.Bound()))
			}
		case intent.Quarantined:
			// A person settles it; it holds its budget meanwhile.
		}
		if final {
			switch {
			case len(fs) > 0 && it.State != intent.Applied && it.State != intent.Quarantined:
				w.violations = append(w.violations, fmt.Sprintf("quiet ledger: intent %s is %s but the rail applied it (%s)", name, it.State, fs[0].EntityID))
			case it.State == intent.Quarantined:
				w.stats.Quarantined++
			}
			if it.StampGeneration > 0 || it.AttemptCount > 1 {
				w.stats.Reopened++
			}
			if it.State == intent.Applied && it.Subject == w.fullPay {
				w.stats.FullRefunds++
			}
		}
	}
	for k := range w.unsettled {
		if !seen[k] {
			delete(w.unsettled, k)
		}
	}
	if w.budget > 0 {
		bs, err := w.env.Store.Budgets(ctx, w.mandate)
		if err != nil {
			return err
		}
		for _, b := range bs {
			if b.Held < 0 || b.Spent < 0 || b.Held+b.Spent > b.Budget {
				w.violations = append(w.violations, fmt.Sprintf("budget %s: held %d + spent %d > budget %d", b.Currency, b.Held, b.Spent, b.Budget))
			}
			if final && b.Spent != movedApplied {
				w.violations = append(w.violations, fmt.Sprintf("quiet ledger: budget %s spent %d, but the APPLIED intents moved %d at the rail", b.Currency, b.Spent, movedApplied))
			}
		}
		if moved > w.budget {
			w.violations = append(w.violations, fmt.Sprintf("%d moved at the rail under a budget of %d", moved, w.budget))
		}
	}
	// Seal what the run has written so far, as a sequencer would between
	// decisions, and verify the log: sealed records, checkpoints and every
	// intent's path of records.
	if w.auditSigner == nil {
		skey, _, err := audit.GenerateKey("sim.audit")
		if err != nil {
			return err
		}
		if w.auditSigner, w.auditVerifier, err = audit.ParseSigner(skey); err != nil {
			return err
		}
	}
	for {
		n, err := w.env.Store.SealAccount(ctx, w.account, w.auditSigner, ledger.SealBatch)
		if err != nil {
			return err
		}
		if n < ledger.SealBatch {
			break
		}
	}
	rep, err := w.env.Store.VerifyAudit(ctx, ledger.AuditVerifyOptions{RailAccount: w.account, Verifiers: []note.Verifier{w.auditVerifier}})
	if err != nil {
		return err
	}
	for _, p := range rep.Problems {
		w.violations = append(w.violations, "audit: "+p.Error())
	}
	if rep.Unsealed != 0 {
		w.violations = append(w.violations, fmt.Sprintf("audit: %d records left unsealed after sealing", rep.Unsealed))
	}
	if final && (w.nUnsettle > 0 || len(w.pipes) > 0) {
		w.violations = append(w.violations, fmt.Sprintf("quiet ledger: %d intents unsettled, %d requests in flight", w.nUnsettle, len(w.pipes)))
	}
	return nil
}

func entityIDs(fs []mockrail.Effect) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.EntityID
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
