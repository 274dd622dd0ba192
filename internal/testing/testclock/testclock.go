// Package testclock is a clock a test moves by hand, for code that takes a
// Now func (limiters, engines, certificate managers). It is safe for
// concurrent use: the code under test may read it from other goroutines.
package testclock

import (
	"sync"
	"time"
)

// Clock reads the time it was set to until the test moves it.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock reading start.
func New(start time.Time) *Clock { return &Clock{t: start} }

// Now is the clock's time; pass c.Now where code asks for a clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d (back, for a negative d).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
