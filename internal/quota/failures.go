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
// address, as a component Countersign trusts observed it: see Peers) and per
// identity (a non-secret key of the presented credential), and blocks a
// source or an identity whose bucket of failures is empty. Only failures are
// counted: a caller that authenticates is never slowed here.
//
// What each key can and cannot be made to do, by a caller that chooses every
// byte it sends:
//
//   - The identity is the presented credential's hash, which the caller
//     chooses: a guesser presents a new one every time, so the identity
//     bucket cannot bound guessing. It only slows one wrong credential sent
//     over and over (a misconfigured client), and it cannot be used against
//     anyone else: to fail under another credential's key one would have to
//     present that credential, and then one would not fail.
//   - The source is what bounds guessing: it cannot be invented (Peers), so
//     a guesser gets Burst failures and then Rate per second, wherever it
//     sends them.
//   - But a source can be shared: every agent in a pod reaches Envoy, and
//     every owner behind a port-forward reaches the API, from 127.0.0.1. A
//     source blocked by one caller's failures would lock out every other
//     caller there. So a credential that has authenticated (Admit,
//     AdmitFor) is exempt from its source's block from then on: it is the
//     one thing a guesser cannot produce. It stays subject to its own
//     identity bucket and is forgotten as soon as it fails (Note, Forget).
//
// The exemption is a memory of credentials that authenticated, not a
// lookup: deciding it from the credential's validity would mean looking
// every presented credential up in the ledger first, from a blocked source
// too, and the block exists precisely to stop an unauthenticated flood of
// those lookups. Only a credential already remembered skips the block
// without a lookup; anything else waits with its source.
//
// That memory is bounded, so who can make it forget matters. Credentials
// admitted for an owner (AdmitFor) are kept per owner: each owner holds at
// most DefaultKnownPerOwner of them and its newest evicts its own oldest,
// so an owner that authenticates without end (a console sign-in mints a
// new session each time) churns only its own entries. Another owner's are
// forgotten only when the whole set is full, which takes MaxKeys /
// DefaultKnownPerOwner owners active at once: owner ids are issued by the
// operator (tokens) or the issuer's allowlist (OIDC), so no caller can
// mint them to get there. Credentials admitted without an owner (Admit:
// agent credentials) share one partition bounded by MaxKeys, as before.
//
// What remains: a valid credential never seen by this process (new, or
// first used after a restart, or forgotten) from a source another caller
// keeps blocked waits until that source's bucket refills, 1/Rate seconds
// per attempt.
//
// Callers check Check (or Blocked and BlockedIdentity) before they look a
// credential up, Note after it failed, AdmitFor (or Admit) after it
// succeeded. The
// identity must never be the secret itself: use a hash of it (e.g. the hex
// of the first 8 bytes of its SHA-256) or the credential's id.
type Failures struct {
	source, identity *Limiter
	known            *knownSet
}

// NewFailures returns a failure counter. Each Options' Burst is how many
// failures are tolerated at once and Rate how fast they are forgiven (events
// per second); a zero Rate turns that half off. perIdentity's MaxKeys also
// bounds how many authenticated credentials are remembered in all, and
// DefaultKnownPerOwner how many of one owner's.
func NewFailures(perSource, perIdentity Options) *Failures {
	return &Failures{source: NewLimiter(perSource), identity: NewLimiter(perIdentity),
		known: newKnownSet(perIdentity.MaxKeys, DefaultKnownPerOwner)}
}

// Note counts one failed attempt from source with identity; an empty
// identity (nothing recognisable was presented) counts against the source
// only. A failing identity is no longer exempt from its source's block.
func (f *Failures) Note(source, identity string) {
	if f == nil {
		return
	}
	f.source.Charge(source)
	if identity != "" {
		f.identity.Charge(identity)
		f.known.remove(identity)
	}
}

// Admit records that identity authenticated, for no owner in particular
// (an agent credential): from now on its source's failures do not block it.
func (f *Failures) Admit(identity string) {
	f.AdmitFor("", identity)
}

// AdmitFor records that identity authenticated as owner: from now on its
// source's failures do not block it. It is remembered among owner's own
// credentials, so that no other owner's activity can push it out.
func (f *Failures) AdmitFor(owner, identity string) {
	if f == nil || identity == "" {
		return
	}
	f.known.add(owner, identity)
}

// Forget withdraws identity's exemption (its credential was found revoked
// or expired).
func (f *Failures) Forget(identity string) {
	if f == nil || identity == "" {
		return
	}
	f.known.remove(identity)
}

// Known reports whether identity authenticated and has not failed since.
func (f *Failures) Known(identity string) bool {
	return f != nil && identity != "" && f.known.has(identity)
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

// Check is the whole test before a lookup: nil, or an *ExhaustedError
// carrying the longer wait. A known identity is not held to its source's
// block; every identity is held to its own.
func (f *Failures) Check(source, identity string) error {
	var bs bool
	var ws time.Duration
	if !f.Known(identity) {
		bs, ws = f.Blocked(source)
	}
	bi, wi := f.BlockedIdentity(identity)
	if !bs && !bi {
		return nil
	}
	return &ExhaustedError{Scope: "failed authentications", RetryAfter: max(ws, wi)}
}
