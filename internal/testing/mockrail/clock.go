package mockrail

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"
)

// Clock is the time source of a Server.
type Clock interface {
	Now() time.Time
	// After delivers the clock's time once d has passed on it.
	After(d time.Duration) <-chan time.Time
}

// RealClock is wall-clock time.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// ManualClock is a Clock that moves only when told to: tests advance it to
// expire replica lag, idempotency keys and fault delays without sleeping.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []manualTimer
	changed chan struct{} // closed and replaced when a timer is added
}

type manualTimer struct {
	at time.Time
	ch chan time.Time
}

// NewManualClock returns a ManualClock standing at t.
func NewManualClock(t time.Time) *ManualClock {
	return &ManualClock{now: t, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives once the clock has been advanced by d.
func (c *ManualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, manualTimer{at: c.now.Add(d), ch: ch})
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

// Advance moves the clock forward by d, firing the timers that fall due.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(c.now.Add(d))
}

// Set moves the clock to t, firing the timers that fall due.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(t)
}

func (c *ManualClock) setLocked(t time.Time) {
	c.now = t
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(t) {
			kept = append(kept, tm)
			continue
		}
		tm.ch <- t
	}
	c.timers = kept
}

// Pending counts timers not yet fired (including ones whose waiter has since
// given up).
func (c *ManualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitForTimers blocks until at least n timers are pending or ctx ends: a
// test uses it to know that a request is sleeping on the clock before it
// advances the clock.
func (c *ManualClock) WaitForTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		if len(c.timers) >= n {
			c.mu.Unlock()
			return nil
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Razorpay ids carry 14 characters after the prefix, Stripe ids 24.
var razorpayPrefixes = map[string]bool{"rfnd_": true, "pout_": true, "pay_": true, "fa_": true}

func idLength(prefix string) int {
	if razorpayPrefixes[prefix] {
		return 14
	}
	return 24
}

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// RandomIDs returns an id source that makes rail-shaped random ids, so
// nothing can rely on ids sorting in creation order.
func RandomIDs() func(prefix string) string {
	return func(prefix string) string {
		n := idLength(prefix)
		b := make([]byte, n)
		_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
		for i := range b {
			b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
		}
		return prefix + string(b)
	}
}

// SequentialIDs returns a deterministic id source: per prefix, a counter
// zero-padded to 14 digits (re_00000000000001, rfnd_00000000000001, …).
func SequentialIDs() func(prefix string) string {
	var mu sync.Mutex
	next := map[string]int{}
	return func(prefix string) string {
		mu.Lock()
		defer mu.Unlock()
		next[prefix]++
		return fmt.Sprintf("%s%014d", prefix, next[prefix])
	}
}
