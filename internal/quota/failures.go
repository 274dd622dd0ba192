package quota

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrExhausted is what every quota refusal matches with errors.Is.
var ErrExhausted = errors.New("quota: exhausted")

// ExhaustedError is a quota refusal: which quota, and when to come back.
type ExhaustedError struct {
	// Scope names the quota, e.g. "source", "owner", "failed authentications".
	Scope string
	// RetryAfter is how long until the quota allows one more event.
	RetryAfter time.Duration
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("quota: too many requests (%s); retry after %ds", e.Scope, RetryAfterSeconds(e.RetryAfter))
}

// Is makes an *ExhaustedError match ErrExhausted.
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// RetryAfterSeconds is d rounded up to whole seconds, at least 1: the value
// of an HTTP Retry-After header (RFC 9110 §10.2.3), which has no fractions.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(int64(math.Ceil(d.Seconds())), 1)
}

// Failures counts failed credential attempts per source (the caller's
// address) and per identity (a non-secret key of the presented credential),
// and blocks a source or an identity whose bucket of failures is empty. Only
// failures are counted: a caller that authenticates is never slowed here.
//
// Callers check Blocked before they look a credential up, and Note after it
// failed. The identity must never be the secret itself: use a hash of it
// (e.g. the hex of the first 8 bytes of its SHA-256) or the credential's id.
type Failures struct {
	source, identity *Limiter
}

// NewFailures returns a failure counter. Each Options' Burst is how many
// failures are tolerated at once and Rate how fast they are forgiven (events
// per second); a zero Rate turns that half off.
func NewFailures(perSource, perIdentity Options) *Failures {
	return &Failures{source: NewLimiter(perSource), identity: NewLimiter(perIdentity)}
}

// Note counts one failed attempt from source with identity; an empty
// identity (nothing recognisable was presented) counts against the source
// only.
func (f *Failures) Note(source, identity string) {
	if f == nil {
		return
	}
	f.source.Charge(source)
	if identity != "" {
		f.identity.Charge(identity)
	}
}

// Blocked reports whether source has failed too often, and for how long it
// stays blocked.
func (f *Failures) Blocked(source string) (bool, time.Duration) {
	if f == nil {
		return false, 0
	}
	return f.source.Blocked(source)
}

// BlockedIdentity reports whether identity has failed too often, from
// whatever sources, and for how long it stays blocked.
func (f *Failures) BlockedIdentity(identity string) (bool, time.Duration) {
	if f == nil || identity == "" {
		return false, 0
	}
	return f.identity.Blocked(identity)
}

// Check is Blocked and BlockedIdentity together: nil, or an
// *ExhaustedError carrying the longer wait.
func (f *Failures) Check(source, identity string) error {
	bs, ws := f.Blocked(source)
	bi, wi := f.BlockedIdentity(identity)
	if !bs && !bi {
		return nil
	}
	return &ExhaustedError{Scope: "failed authentications", RetryAfter: max(ws, wi)}
}
