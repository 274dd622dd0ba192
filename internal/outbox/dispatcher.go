// Package outbox delivers the ledger's transactional outbox to owner
// webhooks (DESIGN.md §7 Events): each event is POSTed as JSON, signed with
// the webhook's secret, at least once. Deliveries are claimed under leases,
// so several dispatchers (in one process or many) share the work and a
// dispatcher that dies mid-delivery loses its claim when the lease expires;
// the delivery is then sent again, with the same Countersign-Delivery id.
// Failures back off exponentially with full jitter; after MaxAttempts the
// delivery becomes a dead letter that the owner can list and replay.
package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
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
	ClaimDeliveries(ctx context.Context, owner string, ttl time.Duration, limit int) ([]ledger.Delivery, error)
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
	// Batch is how many deliveries one pass claims and sends concurrently.
	Batch int
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

// Run delivers until ctx ends: a pass every interval, and at once again
// after a pass that found a full batch. Deliveries in flight when ctx ends
// are abandoned unrecorded; their leases expire and they are sent again.
func (d *Dispatcher) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	c := d.settings()
	t := time.NewTicker(interval)
	defer t.Stop()
	outage := &logging.Outage{Log: c.Log, What: "outbox dispatch"}
	for {
		rep, err := c.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		outage.Observe(err)
		if err == nil && rep.claimed >= c.Batch {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass claims one batch of due deliveries, sends them concurrently and
// records each result. It returns how many were delivered, failed (to be
// retried) and became dead letters. A result the dispatcher may no longer
// record (its lease was lost) is logged, not returned as an error.
func (d *Dispatcher) Pass(ctx context.Context) (delivered, failed, dead int, err error) {
	c := d.settings()
	rep, err := c.pass(ctx)
	return rep.delivered, rep.failed, rep.dead, err
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

func (c *worker) pass(ctx context.Context) (rep report, err error) {
	if c.Store == nil || c.Owner == "" {
		return rep, errNoOwner
	}
	start := time.Now()
	ds, err := c.Store.ClaimDeliveries(ctx, c.Owner, c.Lease, c.Batch)
	if err != nil {
		return rep, fmt.Errorf("outbox: claim: %w", err)
	}
	rep.claimed = len(ds)
	if len(ds) > 0 {
		// A span per batch (an idle pass every second would be noise),
		// from the pass's start.
		var span trace.Span
		ctx, span = telemetry.Tracer(c.Tracer).Start(ctx, "outbox.batch", trace.WithTimestamp(start))
		defer func() {
			span.SetAttributes(attribute.Int("countersign.outbox.claimed", rep.claimed), attribute.Int("countersign.outbox.delivered", rep.delivered),
				attribute.Int("countersign.outbox.failed", rep.failed), attribute.Int("countersign.outbox.dead", rep.dead))
			telemetry.End(span, err)
		}()
	}
	outcomes := make([]outcome, len(ds))
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	for i, dl := range ds {
		wg.Go(func() { outcomes[i], errs[i] = c.deliver(ctx, dl) })
	}
	wg.Wait()
	for _, o := range outcomes {
		switch o {
		case outcomeDelivered:
			rep.delivered++
		case outcomeFailed:
			rep.failed++
		case outcomeDead:
			rep.dead++
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

// deliver makes one attempt of dl and records its result.
func (c *worker) deliver(ctx context.Context, dl ledger.Delivery) (outcome, error) {
	log := c.Log.With("delivery", dl.ID(), "event", dl.EventType, "attempt", dl.Attempt)
	status, failure := c.send(ctx, dl)
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
// the webhook answered 2xx, what went wrong.
func (c *worker) send(ctx context.Context, dl ledger.Delivery) (int, string) {
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, dl.URL, bytes.NewReader(dl.Payload))
	if err != nil {
		return 0, "bad webhook url"
	}
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Countersign-Webhooks/1")
	req.Header.Set(HeaderEvent, dl.EventType)
	req.Header.Set(HeaderDelivery, dl.ID())
	req.Header.Set(HeaderAttempt, strconv.Itoa(dl.Attempt))
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(string(dl.Secret), now, dl.Payload))
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, describe(err, c.Timeout)
	}
	defer func() { _ = resp.Body.Close() }()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	// Drain a little more so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, ""
	}
	msg := "HTTP " + strconv.Itoa(resp.StatusCode)
	if s := printable(head); s != "" {
		msg += ": " + s
	}
	return resp.StatusCode, msg
}

// describe says why a request got no answer, without its URL (which may
// carry a token the owner put in it).
func describe(err error, timeout time.Duration) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return "no answer within " + timeout.String()
	}
	return err.Error()
}

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
