// Package reconcile settles ambiguous outcomes against the rail before
// anything is retried: it lists what the rail really did, pages to
// exhaustion, matches on the stamp only, and records what it found.
package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/inert"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/logging"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/telemetry"
)

// Ledger is what the reconciler needs from the ledger.
type Ledger interface {
	ExpireLeasesIn(ctx context.Context, limit int, delay time.Duration, scope ledger.ReconcileScope) (int, error)
	ClaimReconcileIn(ctx context.Context, owner string, ttl time.Duration, limit int, scope ledger.ReconcileScope) ([]ledger.ReconcileWork, error)
	RecordFinding(ctx context.Context, f ledger.Finding) (ledger.Intent, error)
}

// Rails finds a rail account by id.
type Rails interface {
	ByID(id string) (*rails.Account, bool)
}

// Options tune the reconciler.
type Options struct {
	// Owner names this reconciler in leases.
	Owner string
	// ClaimTTL bounds one intent's reconciliation; a reconciler that dies
	// loses its claim after it.
	ClaimTTL time.Duration
	// Delay is the minimum wait before the first query of an intent whose
	// lease expires (no read-your-writes at the rails).
	Delay time.Duration
	// MaxAttempts inconclusive passes quarantine an intent.
	MaxAttempts int
	// Batch is how many intents one pass claims.
	Batch int
	// SinceSlack widens the creation-time bound given to listings (since):
	// it is taken off the start of the first attempt under the stamp
	// sought, on the database's clock, while the rail dates its entities
	// by its own. It covers any plausible difference between the two
	// (NTP keeps them within seconds; the default, an hour, is far
	// beyond), not the intent's age: a wider bound only makes every
	// listing of the account longer (found by a review: a day before the
	// intent's creation let an agent make old intents' listings run to
	// the page cap).
	SinceSlack time.Duration
	// Tracer traces each pass that finds work (nil: no spans).
	Tracer trace.TracerProvider
	// Metrics, when set, counts what the passes did.
	Metrics *Metrics
}

// DefaultSinceSlack is Options.SinceSlack's default.
const DefaultSinceSlack = time.Hour

// Worker reconciles. It is safe to run several, in one process or many.
type Worker struct {
	ledger Ledger
	rails  Rails
	opts   Options
	log    *slog.Logger
	tracer trace.Tracer
}

// New returns a worker.
func New(l Ledger, r Rails, opts Options, log *slog.Logger) *Worker {
	if opts.ClaimTTL <= 0 {
		opts.ClaimTTL = 2 * time.Minute
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 6
	}
	if opts.Batch <= 0 {
		opts.Batch = 16
	}
	if opts.SinceSlack <= 0 {
		opts.SinceSlack = DefaultSinceSlack
	}
	if opts.Owner == "" {
		opts.Owner = "reconciler"
	}
	return &Worker{ledger: l, rails: r, opts: opts, log: log, tracer: telemetry.Tracer(opts.Tracer)}
}

// Report counts what one pass did.
type Report struct {
	Expired      int
	Claimed      int
	Applied      int
	Absent       int
	Inconclusive int
	Quarantined  int
	Results      []Result
}

// Result is one intent's outcome in a pass.
type Result struct {
	Key     ledger.Key
	Outcome ledger.FindingOutcome
	State   string
	Pages   int
	Entity  string
	Detail  string
}

// Pass expires stale attempt leases, then reconciles the intents that are
// due (only, when set, restricts it to one intent).
func (w *Worker) Pass(ctx context.Context, only *ledger.Key) (Report, error) {
	return w.PassIn(ctx, ledger.ReconcileScope{Only: only}, 0)
}

// PassIn is Pass over the intents in scope only, claiming at most limit
// of them (0, or more than Options.Batch: Options.Batch). An owner's pass
// (scope.OwnerID) expires, claims and reads the rail for none of another
// owner's intents.
func (w *Worker) PassIn(ctx context.Context, scope ledger.ReconcileScope, limit int) (rep Report, err error) {
	start := time.Now()
	if limit <= 0 || limit > w.opts.Batch {
		limit = w.opts.Batch
	}
	n, err := w.ledger.ExpireLeasesIn(ctx, w.opts.Batch*4, w.opts.Delay, scope)
	if err != nil {
		return rep, err
	}
	rep.Expired = n
	w.opts.Metrics.expired(n)
	work, err := w.ledger.ClaimReconcileIn(ctx, w.opts.Owner, w.opts.ClaimTTL, limit, scope)
	if err != nil {
		return rep, err
	}
	rep.Claimed = len(work)
	if rep.Expired > 0 || rep.Claimed > 0 {
		// A span per pass that found work (an idle pass every second
		// would be noise), from the pass's start.
		var span trace.Span
		ctx, span = w.tracer.Start(ctx, "reconcile.batch", trace.WithTimestamp(start))
		defer func() {
			span.SetAttributes(attribute.Int("countersign.reconcile.expired", rep.Expired), attribute.Int("countersign.reconcile.claimed", rep.Claimed),
				attribute.Int("countersign.reconcile.applied", rep.Applied), attribute.Int("countersign.reconcile.absent", rep.Absent),
				attribute.Int("countersign.reconcile.inconclusive", rep.Inconclusive), attribute.Int("countersign.reconcile.quarantined", rep.Quarantined))
			telemetry.End(span, err)
		}()
	}
	for _, wk := range work {
		res, err := w.one(ctx, wk)
		if err != nil {
			// The claim lapses and another pass takes the intent again.
			w.log.Error("reconcile: recording a finding failed", "intent", wk.Intent.String(), "err", err)
			w.opts.Metrics.outcome(outcomeRecordFailed)
			continue
		}
		rep.Results = append(rep.Results, res)
		switch {
		case res.State == "QUARANTINED":
			rep.Quarantined++
			w.opts.Metrics.outcome(outcomeQuarantined)
		case res.Outcome == ledger.FindingApplied:
			rep.Applied++
			w.opts.Metrics.outcome(string(ledger.FindingApplied))
		case res.Outcome == ledger.FindingAbsent:
			rep.Absent++
			w.opts.Metrics.outcome(string(ledger.FindingAbsent))
		default:
			rep.Inconclusive++
			w.opts.Metrics.outcome(string(ledger.FindingInconclusive))
		}
	}
	return rep, nil
}

// one reconciles one claimed intent.
func (w *Worker) one(ctx context.Context, wk ledger.ReconcileWork) (Result, error) {
	it, at := wk.Intent, wk.Attempt
	f := ledger.Finding{Key: it.Key, AttemptSeq: at.Seq, Owner: w.opts.Owner, MaxReconciles: w.opts.MaxAttempts,
		Retry: w.backoff(it.ReconcileCount)}
	acct, ok := w.rails.ByID(it.RailAccount)
	switch {
	case NeverSent(wk):
		// No listing can show more than the ledger does: the request never
		// left. Listing anyway cost the account's shared rate limit a read
		// of every entity since the intent, per request an agent dropped.
		f.Outcome, f.PaginationExhausted, f.NeverSent = ledger.FindingAbsent, true, true
		f.Detail = fmt.Sprintf("attempt %d never left: ext_proc never marked it sent, and it is %s", at.Seq, at.Outcome)
	case !ok:
		f.Outcome, f.Detail = ledger.FindingInconclusive, fmt.Sprintf("rail account %s is not configured here", it.RailAccount)
	default:
		a, err := engine.ActionOf(it)
		var found rail.Finding
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, w.opts.ClaimTTL)
			found, err = acct.Adapter.Find(cctx, acct.Client, a, at.Stamp, listedSince(wk, w.opts.SinceSlack))
			cancel()
		}
		f.Pages = found.Pages
		switch {
		case err != nil:
			// The error carries the rail's own message (or a proxy's
			// page), and Detail becomes the intent's reason, which leaves
			// in signed webhooks: every rail-written byte in it is inert.
			f.Outcome, f.Detail = ledger.FindingInconclusive, "listing failed: "+inert.Text(err.Error())
		case found.Match != nil && unlike(a, *found.Match) != "":
			// The rail made something under this attempt's stamp, but not
			// what was decided: the rail read the request otherwise than
			// Countersign did (a parser differential the agent may have
			// aimed at an answer it made ambiguous, so that no answer
			// check saw it). Neither APPLIED (the ledger would post the
			// intent's amount, not the rail's) nor absent: a person
			// settles it now, without more listings.
			f.Outcome, f.MaxReconciles = ledger.FindingInconclusive, 1
			f.Detail = fmt.Sprintf("%s carries stamp %s, but %s: the rail did not make what was decided; check the rail before resolving",
				inert.Token(found.Match.ID), at.Stamp, unlike(a, *found.Match))
		case found.Match != nil:
			f.Outcome, f.EntityID, f.EntityBody = ledger.FindingApplied, found.Match.ID, found.Match.Raw
			f.Detail = fmt.Sprintf("%s carries stamp %s", inert.Token(found.Match.ID), at.Stamp)
		case !found.Exhausted:
			// Absence on a page is not absence.
			f.Outcome, f.Detail = ledger.FindingInconclusive, fmt.Sprintf("no match in %d pages, but the listing was not read to the end", found.Pages)
		case !at.BodyStamped && (at.LeftUnstamped || !at.ViaEnvoy):
			// The rails show only the body stamp on their entities; a
			// request that may have gone without it (one ext_proc let
			// leave with no body or no place for the stamp, or a native
			// caller that did not confirm the stamp) cannot be proven
			// absent by listing. A person settles it (it ends QUARANTINED).
			// Through Envoy, a request never marked sent never left:
			// ext_proc marks every request (stamped or not) before letting
			// it go, and stops it if the mark fails. The database refuses
			// CONFIRMED_NOT_APPLIED in these cases whatever the writer
			// (migration 00029).
			//
			// Once the rail can no longer apply the attempt (RailDone),
			// this listing shows all that a later one could: listing again
			// settled nothing and cost the account's shared rate limit
			// every page once a pass, six passes per native ALLOW an agent
			// never committed (found by a review). A person settles it now.
			f.Outcome = ledger.FindingInconclusive
			f.Detail = fmt.Sprintf("no match in %d pages, but the request was never confirmed to carry the body stamp, so absence proves nothing", found.Pages)
			if wk.RailDone {
				f.MaxReconciles = 1
				f.Detail += "; the rail can no longer apply it, so listing again would show no more: check the rail before resolving"
			}
		default:
			f.Outcome, f.PaginationExhausted = ledger.FindingAbsent, true
			f.Detail = fmt.Sprintf("no entity with stamp %s in %d pages read to the end", at.Stamp, found.Pages)
		}
	}
	out, err := w.ledger.RecordFinding(ctx, f)
	if err != nil {
		return Result{}, err
	}
	w.log.Info("reconciled", "intent", it.String(), "attempt", at.Seq, "outcome", string(f.Outcome),
		"state", string(out.State), "pages", f.Pages)
	return Result{Key: it.Key, Outcome: f.Outcome, State: string(out.State), Pages: f.Pages, Entity: f.EntityID, Detail: f.Detail}, nil
}

// listedSince is the creation-time bound of wk's listing: slack before the first
// attempt under its stamp started (ledger.Tx.StampFirstStarted: no request
// carrying the stamp left earlier, a retry's included), or before the
// intent was created, which precedes every attempt, when the claim did not
// say.
func listedSince(wk ledger.ReconcileWork, slack time.Duration) time.Time {
	first := wk.StampFirstStarted
	if first.IsZero() {
		first = wk.Intent.CreatedAt
	}
	return first.Add(-slack)
}

// unlike says how the entity e the listing shows under an attempt's stamp
// differs from the action a the intent decided ("" when it does not): as
// the adapter's answer check reads it (e.Unlike: the payment or the
// destination too), else its amount (a full refund names none: its amount
// is the rail's) or its currency.
func unlike(a rail.Action, e rail.Entity) string {
	switch {
	case e.Unlike != "":
		// The adapter's sentence quotes the listed entity's id, currency
		// and destination as the rail wrote them.
		return inert.Text(e.Unlike)
	case a.AmountMinor != nil && e.AmountMinor != *a.AmountMinor:
		return fmt.Sprintf("it is for %d, the intent for %d", e.AmountMinor, *a.AmountMinor)
	case a.Currency != "" && !strings.EqualFold(e.Currency, a.Currency):
		return fmt.Sprintf("it is in %q, the intent in %s", inert.Token(e.Currency), inert.Token(a.Currency))
	}
	return ""
}

// NeverSent reports whether wk's attempt never left, and no listing could
// show more: an attempt allowed through Envoy with ext_proc in the path
// that ext_proc never marked sent (it marks every request it lets leave,
// stamped or not, in the statement that checks the attempt is pending and
// its lease live), that is no longer pending (its lease expired, or
// ext_proc stopped it), so that no mark can come, and no earlier attempt
// under its stamp may have left (whose entity a listing would show).
func NeverSent(wk ledger.ReconcileWork) bool {
	at := wk.Attempt
	return at.ViaEnvoy && !at.BodyStamped && !at.LeftUnstamped && at.Outcome != "pending" && at.Outcome != "" && !wk.EarlierMayHaveLeft
}

// backoff spaces inconclusive passes: delay·2^n, at least a second, at
// most five minutes.
func (w *Worker) backoff(n int) time.Duration {
	d := max(w.opts.Delay, time.Second)
	for range min(n, 10) {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// Run reconciles every interval until ctx ends.
func (w *Worker) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	outage := &logging.Outage{Log: w.log, What: "reconcile"}
	for {
		_, err := w.Pass(ctx, nil)
		if ctx.Err() != nil {
			return
		}
		outage.Observe(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
