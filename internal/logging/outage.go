package logging

import (
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Outage turns the result of a loop that retries (a reconcile pass, an
// outbox pass) into two log lines per outage: one when it starts failing and
// one when it works again, instead of one warning per try. Safe for
// concurrent use.
type Outage struct {
	Log  *slog.Logger
	What string // "reconcile", "outbox": prefixed to both lines
	Now  func() time.Time

	mu     sync.Mutex
	since  time.Time
	failed int
}

// Observe records one try's result and logs only a change.
func (o *Outage) Observe(err error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.Log == nil {
		return
	}
	switch {
	case err != nil && o.failed == 0:
		o.since = now()
		o.failed = 1
		o.Log.Warn(o.What+": failing; retrying quietly until it works again", "err", OneLine(err))
	case err != nil:
		o.failed++
	case o.failed > 0:
		o.Log.Info(o.What+": working again", "down_for", now().Sub(o.since).Round(time.Millisecond).String(), "failed_tries", o.failed)
		o.failed = 0
	}
}

// OneLine is err's text on one line: drivers put newlines and tabs in
// connection errors, which split a text log line.
func OneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
