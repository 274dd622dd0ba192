// Package outbox delivers the ledger's transactional outbox to owner
// webhooks (DESIGN.md §7 Events): each event is POSTed as JSON, signed with
// the webhook's secret, at least once. Deliveries are claimed under leases,
// so several dispatchers (in one process or many) share the work and a
// dispatcher that dies mid-delivery loses its claim when the lease expires;
// the delivery is then sent again, with the same Countersign-Delivery id.
// Failures back off exponentially with full jitter; after MaxAttempts the
// delivery becomes a dead letter that the owner can list and replay. A
// dispatcher keeps up to Batch deliveries in flight, claiming more as each
// ends, and at most PerOwner of one owner's: an owner whose webhooks answer
// slowly, or never, holds its own slots and no one else's.
package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/logging"
	"github.com/countersign/countersign/internal/telemetry"
)

// Store is what the dispatcher needs from the ledger.
type Store interface {
	ClaimDeliveriesCapped(ctx context.Context, owner string, ttl time.Duration, limit int, oc ledger.OwnerCap) ([]ledger.Delivery, error)
	MarkDelivered(ctx context.Context, d ledger.Delivery, owner string) error
	MarkFailed(ctx context.Context, d ledger.Delivery, owner string, f ledger.DeliveryFailure) error
}

// Defaults of the zero Dispatcher fields.
const (
	DefaultMaxAttempts = 12
	DefaultBaseBackoff = time.Second
	DefaultMaxBackoff  = 10 * time.Minute
	DefaultLease       = 30 * time.Second
	DefaultBatch       = 16
	DefaultTimeout     = 10 * time.Second
)

// Dispatcher delivers due events. Zero fields take the defaults above.
type Dispatcher struct {
	Store Store
	// HTTP sends the deliveries; nil means Addresses.Client(): no
	// redirects (a 3xx is a failed attempt, never a POST elsewhere), and
	// no connection to a special-purpose address Addresses does not allow.
	HTTP *http.Client
	// Addresses is the policy of the default client.
	Addresses AddressPolicy
	// Owner names this dispatcher in leases; it must be unique among the
	// dispatchers running at once. Required.
	Owner string
	// MaxAttempts attempts fail before a delivery is a dead letter.
	MaxAttempts int
	// BaseBackoff and MaxBackoff bound the wait after the n-th failure:
	// a random duration in [0, min(MaxBackoff, BaseBackoff·2^(n-1))].
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// Lease is how long a claimed delivery stays this dispatcher's. If it
	// dies, the delivery is sent again once the lease has expired.
	Lease time.Duration
	// Batch is how many deliveries the dispatcher sends at once.
	Batch int
	// PerOwner is how many of them may be one owner's at once; 0 means
	// max(1, Batch/4). An owner whose webhooks never answer holds PerOwner
	// slots for an attempt's Timeout; the other owners' deliveries go on
	// through the rest.
	PerOwner int
	// Timeout bounds one attempt; it is capped at Lease/2 so that the
	// result is recorded while the lease still holds.
	Timeout time.Duration
	Log     *slog.Logger
	Metrics *Metrics
	// Tracer traces each pass that claims deliveries (nil: no spans).
	Tracer trace.TracerProvider

	// jitter returns a uniform random int64 in [0, n); tests replace it.
	jitter func(n int64) int64
}

var errNoOwner = errors.New("outbox: dispatcher needs a Store and an Owner")

// worker is a Dispatcher with its defaults filled in.
type worker struct{ Dispatcher }

func (d *Dispatcher) settings() *worker {
	c := &worker{*d}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BaseBackoff <= 0 {
		c.BaseBackoff = DefaultBaseBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	c.MaxBackoff = max(c.MaxBackoff, c.BaseBackoff)
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.PerOwner <= 0 {
		c.PerOwner = max(1, c.Batch/4)
	}
	c.PerOwner = min(c.PerOwner, c.Batch)
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	c.Timeout = min(c.Timeout, c.Lease/2)
	if c.HTTP == nil {
		c.HTTP = c.Addresses.Client()
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.jitter == nil {
		c.jitter = rand.Int64N //nolint:gosec // backoff jitter needs no secrecy
	}
	return c
}

// Run delivers until ctx ends. It keeps up to Batch deliveries in flight,
// at most PerOwner of one owner's, and claims more as they end: at once
// while claims come back full or an owner at its cap frees a slot, and
// otherwise every interval. It returns once every delivery in flight has
// ended; those cut short by ctx are abandoned unrecorded, and their
// leases expire and they are sent again.
func (d *Dispatcher) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	c := d.settings()
	t := time.NewTicker(interval)
	defer t.Stop()
	outage := &logging.Outage{Log: c.Log, What: "outbox dispatch"}
	f := c.flight()
	defer f.wait()
	var (
		claim = true  // claim as soon as a slot is free
		more  = false // the last claim came back full: there may be more due
		errs  []error // results not recorded since the last claim
	)
	land := func(l landed) {
		if f.land(l) || more {
			claim = true
		}
		if l.err != nil {
			errs = append(errs, l.err)
		}
	}
	for {
		if ctx.Err() != nil {
			return
		}
		if claim && f.n < c.Batch {
			_, full, err := f.claim(ctx)
			if ctx.Err() != nil {
				return
			}
			outage.Observe(errors.Join(append(errs, err)...))
			errs, claim, more = nil, full, full
		}
		select {
		case <-ctx.Done():
			return
		case l := <-f.done:
			land(l)
			for drained := false; !drained; { // take every delivery that has ended before claiming again
				select {
				case l := <-f.done:
					land(l)
				default:
					drained = true
				}
			}
		case <-t.C:
			claim = true
		}
	}
}

// Pass claims one batch of due deliveries (up to Batch, at most PerOwner
// of one owner's), sends them concurrently and records each result. It
// returns how many were delivered, failed (to be retried) and became dead
// letters. A result the dispatcher may no longer record (its lease was
// lost) is logged, not returned as an error.
func (d *Dispatcher) Pass(ctx context.Context) (delivered, failed, dead int, err error) {
	c := d.settings()
	f := c.flight()
	b, _, err := f.claim(ctx)
	if err != nil || b == nil {
		return 0, 0, 0, err
	}
	f.wait()
	errs := b.errs
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return b.rep.delivered, b.rep.failed, b.rep.dead, errors.Join(errs...)
}

type report struct {
	claimed, delivered, failed, dead int
}

type outcome int

const (
	outcomeAbandoned outcome = iota // ctx ended mid-delivery: nothing recorded
	outcomeDelivered
	outcomeFailed
	outcomeDead
	outcomeLeaseLost
)

// inFlight is the deliveries a dispatcher is sending. Only the goroutine
// that claims (Run's or Pass's) touches it; each delivery reports its end
// on done.
type inFlight struct {
	c    *worker
	wg   sync.WaitGroup
	done chan landed // room for Batch: a delivery never waits to report
	n    int
	held map[string]int // per owner
}

// landed is the end of one delivery.
type landed struct {
	b     *batch
	owner string
	o     outcome
	err   error
}

// batch is the deliveries of one claim: an outbox.batch span (an idle
// claim, every interval, would be noise) from the claim to the end of its
// last delivery.
type batch struct {
	rep  report
	left int
	errs []error
	span trace.Span
}

func (c *worker) flight() *inFlight {
	return &inFlight{c: c, done: make(chan landed, c.Batch), held: map[string]int{}}
}

// claim claims due deliveries for the free slots, within the per-owner
// cap, and starts sending them. It returns their batch (nil if none) and
// whether the claim filled every free slot.
func (f *inFlight) claim(ctx context.Context) (*batch, bool, error) {
	c := f.c
	if c.Store == nil || c.Owner == "" {
		return nil, false, errNoOwner
	}
	free := c.Batch - f.n
	if free <= 0 {
		return nil, false, nil
	}
	start := time.Now()
	ds, err := c.Store.ClaimDeliveriesCapped(ctx, c.Owner, c.Lease, free, ledger.OwnerCap{Max: c.PerOwner, Held: f.held})
	if err != nil {
		return nil, false, fmt.Errorf("outbox: claim: %w", err)
	}
	if len(ds) == 0 {
		return nil, false, nil
	}
	b := &batch{rep: report{claimed: len(ds)}, left: len(ds)}
	bctx, span := telemetry.Tracer(c.Tracer).Start(ctx, "outbox.batch", trace.WithTimestamp(start))
	b.span = span
	for _, dl := range ds {
		f.n++
		f.held[dl.OwnerID]++
		f.wg.Go(func() {
			o, err := c.deliver(bctx, dl)
			f.done <- landed{b: b, owner: dl.OwnerID, o: o, err: err}
		})
	}
	return b, len(ds) == free, nil
}

// land books the end of a delivery. It reports whether its owner was at
// the cap: a slot of its has come free, and it may have more due.
func (f *inFlight) land(l landed) (wasCapped bool) {
	wasCapped = f.held[l.owner] >= f.c.PerOwner
	f.n--
	if f.held[l.owner]--; f.held[l.owner] <= 0 {
		delete(f.held, l.owner)
	}
	b := l.b
	switch l.o {
	case outcomeDelivered:
		b.rep.delivered++
	case outcomeFailed:
		b.rep.failed++
	case outcomeDead:
		b.rep.dead++
	}
	if l.err != nil {
		b.errs = append(b.errs, l.err)
	}
	if b.left--; b.left == 0 {
		b.span.SetAttributes(attribute.Int("countersign.outbox.claimed", b.rep.claimed), attribute.Int("countersign.outbox.delivered", b.rep.delivered),
			attribute.Int("countersign.outbox.failed", b.rep.failed), attribute.Int("countersign.outbox.dead", b.rep.dead))
		telemetry.End(b.span, errors.Join(b.errs...))
	}
	return wasCapped
}

// wait lands every delivery in flight.
func (f *inFlight) wait() {
	for f.n > 0 {
		f.land(<-f.done)
	}
	f.wg.Wait()
}

// deliver makes one attempt of dl and records its result.
func (c *worker) deliver(ctx context.Context, dl ledger.Delivery) (outcome, error) {
	log := c.Log.With("delivery", dl.ID(), "event", dl.EventType, "attempt", dl.Attempt)
	status, failure, detail := c.send(ctx, dl)
	if failure != "" && ctx.Err() != nil {
		// Stopped mid-delivery: not the webhook's failure. The lease
		// lapses and a later pass (here or elsewhere) sends it again.
		log.Info("outbox: delivery abandoned at shutdown")
		return outcomeAbandoned, nil
	}
	// Record the result even if ctx ends now: a delivery that succeeded
	// should not be sent again for want of a mark.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var err error
	o := outcomeDelivered
	if failure == "" {
		err = c.Store.MarkDelivered(mctx, dl, c.Owner)
	} else {
		f := ledger.DeliveryFailure{Status: status, Error: failure}
		if dl.Attempt >= c.MaxAttempts {
			f.Dead, o = true, outcomeDead
		} else {
			f.Retry, o = c.backoff(dl.Attempt), outcomeFailed
		}
		err = c.Store.MarkFailed(mctx, dl, c.Owner, f)
		log = log.With("status", status, "error", failure, "retry_in", f.Retry, "dead", f.Dead)
		if detail != "" {
			log = log.With("detail", detail)
		}
	}
	switch {
	case errors.Is(err, ledger.ErrDeliveryLeaseLost):
		c.Metrics.count("lease_lost")
		log.Warn("outbox: lease lost before the result was recorded; it will be delivered again", "err", err)
		return outcomeLeaseLost, nil
	case err != nil:
		return outcomeAbandoned, fmt.Errorf("outbox: record %s: %w", dl.ID(), err)
	}
	switch o {
	case outcomeDelivered:
		c.Metrics.count("delivered")
		c.Metrics.lag(time.Since(dl.EventAt).Seconds())
		log.Debug("outbox: delivered", "status", status)
	case outcomeFailed:
		c.Metrics.count("failed")
		log.Info("outbox: delivery failed; will retry")
	case outcomeDead:
		c.Metrics.count("dead")
		log.Warn("outbox: delivery failed for the last time; it is a dead letter")
	}
	return o, nil
}

// send POSTs dl once. It returns the HTTP status (0 if none) and, unless
// the webhook answered 2xx, what went wrong: for the owner, and in more
// detail for the operator's log.
func (c *worker) send(ctx context.Context, dl ledger.Delivery) (status int, failure, detail string) {
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, dl.URL, bytes.NewReader(dl.Payload))
	if err != nil {
		return 0, "bad webhook url", ""
	}
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Countersign-Webhooks/1")
	req.Header.Set(HeaderEvent, dl.EventType)
	req.Header.Set(HeaderDelivery, dl.ID())
	req.Header.Set(HeaderAttempt, strconv.Itoa(dl.Attempt))
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(string(dl.Secret), now, dl.Payload))
	var remote atomic.Pointer[netip.Addr] // the address answering, for failure
	req = req.WithContext(httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
		if ap, err := netip.ParseAddrPort(ci.Conn.RemoteAddr().String()); err == nil {
			a := ap.Addr()
			remote.Store(&a)
		}
	}}))
	resp, err := c.HTTP.Do(req)
	if err != nil {
		failure, detail = describe(err, c.Timeout)
		return 0, failure, detail
	}
	defer func() { _ = resp.Body.Close() }()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	// Drain a short body so that the connection can be reused; a longer
	// one, or one of unknown length, is not read (closing it closes the
	// connection).
	if resp.ContentLength >= 0 && resp.ContentLength <= maxDrain {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, "", ""
	}
	var addr netip.Addr
	if a := remote.Load(); a != nil {
		addr = *a
	}
	failure, detail = answerFailure(resp.StatusCode, printable(head), addr)
	return resp.StatusCode, failure, detail
}

// answerFailure describes a non-2xx answer from addr: the status and the first
// bytes of the body for the owner, unless addr is a special-purpose address
// (admitted by --webhook-allow-networks, or unknown), whose body goes to
// the operator's log only: an owner's webhook URL must not read an internal
// service's answers back through last_error.
func answerFailure(status int, body string, addr netip.Addr) (failure, detail string) {
	failure = "HTTP " + strconv.Itoa(status)
	switch {
	case body == "":
		return failure, ""
	case special(addr):
		return failure, "answer: " + body
	}
	return failure + ": " + body, ""
}

// maxDrain is the longest answer body read to the end.
const maxDrain = 4 << 10

func printable(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, string(b))
	return strings.Join(strings.Fields(s), " ")
}

// backoff is the wait after the n-th failed attempt: full jitter over an
// exponentially growing ceiling.
func (c *worker) backoff(n int) time.Duration {
	ceil := c.BaseBackoff
	for i := 1; i < n && ceil < c.MaxBackoff; i++ {
		if ceil > c.MaxBackoff/2 {
			ceil = c.MaxBackoff
		} else {
			ceil *= 2
		}
	}
	return time.Duration(c.jitter(int64(ceil) + 1))
}
