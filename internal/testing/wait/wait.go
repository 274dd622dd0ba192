// Package wait is how tests wait: on a condition, checked as it may have
// changed, under a deadline — never for a guessed duration.
package wait

import "time"

// Tick is how often Until checks its condition.
const Tick = 20 * time.Millisecond

// Until checks cond at once and then every Tick until it holds or within
// has passed, and reports whether it held. The last check is made at the
// deadline, so a condition that comes true just then is not missed.
func Until(within time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
			if cond() {
				return true
			}
		}
	}
}
