// Package quota limits request rates with per-key token buckets: owner API
// calls per source and per owner, and failed credential attempts per source
// and per presented credential. Keys live in a bounded LRU, so a caller that
// cycles through sources or credentials costs a fixed amount of memory; the
// price is that an evicted key starts again with a full bucket.
package quota

import (
	"container/list"
	"math"
	"sync"
	"time"
)

// DefaultMaxKeys bounds the keys a Limiter remembers when Options.MaxKeys is 0.
const DefaultMaxKeys = 10000

// Options configure a Limiter.
type Options struct {
	// Rate is the sustained rate, in events per second. Zero or less turns
	// the limiter off: every event is allowed.
	Rate float64
	// Burst is how many events a full bucket allows at once (at least 1).
	Burst int
	// MaxKeys bounds the keys remembered; the least recently used is
	// forgotten first. 0 means DefaultMaxKeys.
	MaxKeys int
	// Now is the clock; nil means time.Now. Tests inject their own.
	Now func() time.Time
}

// Limiter is a set of token buckets, one per key. The zero value and a nil
// *Limiter allow everything. It is safe for concurrent use.
type Limiter struct {
	rate, burst float64
	maxKeys     int
	now         func() time.Time

	mu    sync.Mutex
	order *list.List // of *bucket, most recently used at the front
	byKey map[string]*list.Element
}

type bucket struct {
	key    string
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

// NewLimiter returns a limiter for o.
func NewLimiter(o Options) *Limiter {
	l := &Limiter{rate: o.Rate, burst: float64(max(o.Burst, 1)), maxKeys: o.MaxKeys, now: o.Now,
		order: list.New(), byKey: map[string]*list.Element{}}
	if l.maxKeys <= 0 {
		l.maxKeys = DefaultMaxKeys
	}
	if l.now == nil {
		l.now = time.Now
	}
	return l
}

func (l *Limiter) off() bool { return l == nil || l.rate <= 0 || l.byKey == nil }

// Allow takes one event from key's bucket. When the bucket is empty it
// answers false and how long until the next event would be allowed.
func (l *Limiter) Allow(key string) (ok bool, retryAfter time.Duration) {
	if l.off() {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, true)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, l.wait(b)
}

// Blocked reports, without taking anything, whether key's bucket is empty,
// and if so how long until it holds one event again. An unknown key is not
// blocked and is not remembered.
func (l *Limiter) Blocked(key string) (blocked bool, retryAfter time.Duration) {
	if l.off() {
		return false, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, false)
	if b == nil || b.tokens >= 1 {
		return false, 0
	}
	return true, l.wait(b)
}

// Charge takes one event from key's bucket even if that empties it (it never
// goes below empty): a failure has already happened and is always counted.
func (l *Limiter) Charge(key string) {
	if l.off() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, true)
	b.tokens = max(b.tokens-1, 0)
}

// Len is the number of keys remembered.
func (l *Limiter) Len() int {
	if l.off() {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}

// bucket returns key's bucket brought up to now, marking it most recently
// used; a missing one is created full (evicting the least recently used key
// at the bound) when create is set, and nil otherwise.
func (l *Limiter) bucket(key string, create bool) *bucket {
	now := l.now()
	if el, ok := l.byKey[key]; ok {
		l.order.MoveToFront(el)
		b := el.Value.(*bucket)
		// A clock that steps back refills nothing; time only adds tokens.
		if elapsed := now.Sub(b.at); elapsed > 0 {
			b.tokens = math.Min(l.burst, b.tokens+elapsed.Seconds()*l.rate)
			b.at = now
		}
		return b
	}
	if !create {
		return nil
	}
	if l.order.Len() >= l.maxKeys {
		oldest := l.order.Back()
		l.order.Remove(oldest)
		delete(l.byKey, oldest.Value.(*bucket).key)
	}
	b := &bucket{key: key, tokens: l.burst, at: now}
	l.byKey[key] = l.order.PushFront(b)
	return b
}

// wait is how long until b holds one whole token.
func (l *Limiter) wait(b *bucket) time.Duration {
	return time.Duration(math.Ceil((1 - b.tokens) / l.rate * float64(time.Second)))
}
