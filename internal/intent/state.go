// Package intent is the payment intent state machine of DESIGN.md §2, written as
// one pure function. It does no I/O: the ledger stores the states as text, audits
// every transition, and generates its Postgres transition guard from Edges(), so
// Go and the database agree on exactly one set of legal edges.
package intent

// State is the lifecycle state of an intent. The values are stored in Postgres as
// text and mirrored in the countersign.v1 proto enum: never rename them.
type State string

// The 11 states, in lifecycle order (the order of States and of Edges).
const (
	// Proposed: the action is recorded under its SIK; gates have not answered.
	Proposed State = "PROPOSED"
	// Held: waiting for the owner's approval of this exact request.
	Held State = "HELD"
	// Authorized: cleared to start an attempt; nothing has been sent for it yet.
	Authorized State = "AUTHORIZED"
	// InFlight: an attempt row is durably committed and the rail call may be
	// under way. A rail 409 "same key still running" (Stripe
	// idempotency_key_in_use, Razorpay 409) is not an event: the intent stays
	// IN_FLIGHT with the same key and the caller backs off.
	InFlight State = "IN_FLIGHT"
	// Applied: the rail applied the action. Absorbing.
	Applied State = "APPLIED"
	// FailedTerminal: the rail gave a definite rejection (4xx, 429, 401 without
	// key), so the attempt is proven not applied. Only a fresh proposal reopens it.
	FailedTerminal State = "FAILED_TERMINAL"
	// Unknown: the attempt's outcome is ambiguous (5xx, timeout, reset, lost
	// response, lease expired). Never retried blindly: only reconciliation helps.
	Unknown State = "UNKNOWN"
	// Reconciling: the reconciler is listing the rail to find the attempt.
	Reconciling State = "RECONCILING"
	// ConfirmedNotApplied: listing ran to exhaustion and found no effect.
	ConfirmedNotApplied State = "CONFIRMED_NOT_APPLIED"
	// Blocked: a gate or the owner refused the action. Absorbing.
	Blocked State = "BLOCKED"
	// Quarantined: parked for an operator with a reason (max attempts, key
	// fingerprint drift). The machine has no edge out; resolution is manual.
	Quarantined State = "QUARANTINED"
)

// Event is something that happened to an intent and may move it to a new state.
type Event string

// The 19 events, in lifecycle order (the order of Events and of Edges).
const (
	GatesPassed      Event = "GATES_PASSED"      // every gate answered ALLOW
	GatesHeld        Event = "GATES_HELD"        // the meet of the gates is HOLD
	GatesBlocked     Event = "GATES_BLOCKED"     // a gate answered BLOCK (first pass or a live re-check)
	HoldReleased     Event = "HOLD_RELEASED"     // the owner approved the held request
	HoldRejected     Event = "HOLD_REJECTED"     // the owner refused (or let expire) the held request
	AttemptStarted   Event = "ATTEMPT_STARTED"   // an attempt row with the next attempt_seq is committed
	RailApplied      Event = "RAIL_APPLIED"      // 2xx with the created entity
	RailRejected     Event = "RAIL_REJECTED"     // definite rejection: not applied
	RailAmbiguous    Event = "RAIL_AMBIGUOUS"    // 5xx, timeout, reset, response lost
	LeaseExpired     Event = "LEASE_EXPIRED"     // the attempt lease ran out without an answer
	Reopened         Event = "REOPENED"          // a fresh proposal of a FAILED_TERMINAL action passed the gates
	ReconcileStarted Event = "RECONCILE_STARTED" // the reconciler took the intent
	FoundApplied     Event = "FOUND_APPLIED"     // listing found the stamped entity
	ConfirmedAbsent  Event = "CONFIRMED_ABSENT"  // listing exhausted pagination without it
	Inconclusive     Event = "INCONCLUSIVE"      // listing could not decide; try again later
	RetryAuthorized  Event = "RETRY_AUTHORIZED"  // a proven-not-applied intent may try again
	Quarantine       Event = "QUARANTINE"        // give up and hand to an operator
	// The owner's resolution of a QUARANTINED intent, after checking the rail
	// itself: the action applied (its hold is posted), or it did not and is
	// not to be sent again (its hold is voided; the intent ends BLOCKED).
	ResolvedApplied    Event = "RESOLVED_APPLIED"
	ResolvedNotApplied Event = "RESOLVED_NOT_APPLIED"
)

var allStates = [...]State{
	Proposed, Held, Authorized, InFlight, Applied, FailedTerminal,
	Unknown, Reconciling, ConfirmedNotApplied, Blocked, Quarantined,
}

var allEvents = [...]Event{
	GatesPassed, GatesHeld, GatesBlocked, HoldReleased, HoldRejected,
	AttemptStarted, RailApplied, RailRejected, RailAmbiguous, LeaseExpired,
	Reopened, ReconcileStarted, FoundApplied, ConfirmedAbsent, Inconclusive,
	RetryAuthorized, Quarantine, ResolvedApplied, ResolvedNotApplied,
}

// States returns every state in lifecycle order. The slice is a fresh copy.
func States() []State { return append([]State(nil), allStates[:]...) }

// Events returns every event in lifecycle order. The slice is a fresh copy.
func Events() []Event { return append([]Event(nil), allEvents[:]...) }

// Valid reports whether s is one of the 11 states.
func (s State) Valid() bool { return stateOrder(s) >= 0 }

// Valid reports whether e is one of the 17 events.
func (e Event) Valid() bool { return eventOrder(e) >= 0 }

func stateOrder(s State) int {
	for i, v := range allStates {
		if v == s {
			return i
		}
	}
	return -1
}

func eventOrder(e Event) int {
	for i, v := range allEvents {
		if v == e {
			return i
		}
	}
	return -1
}

// IsAbsorbing reports whether no event can move an intent out of s (invariant I4).
func IsAbsorbing(s State) bool { return s == Applied || s == Blocked }

// ProvenNotApplied reports whether s proves the latest attempt had no rail
// effect: a definite rejection (FAILED_TERMINAL) or a listing run to exhaustion
// (CONFIRMED_NOT_APPLIED). After a first attempt these are the only states with
// an edge back to AUTHORIZED (I3), and the states on which a budget hold of the
// attempt may be voided (B2).
func ProvenNotApplied(s State) bool { return s == FailedTerminal || s == ConfirmedNotApplied }

// StartsAttempt reports whether e starts a rail attempt, i.e. whether the ledger
// must write a new attempt row with the next attempt_seq (I2, I5). Only
// ATTEMPT_STARTED does, and it is the only event into IN_FLIGHT.
func StartsAttempt(e Event) bool { return e == AttemptStarted }
