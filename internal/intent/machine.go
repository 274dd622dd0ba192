package intent

import (
	"errors"
	"fmt"
	"slices"
)

// Errors returned by Transition. Every refused transition matches
// ErrIllegalTransition; one out of APPLIED or BLOCKED also matches ErrAbsorbing.
// A value that is not a state or event at all is a corrupt input, not a race,
// and matches ErrUnknownState or ErrUnknownEvent instead.
var (
	ErrIllegalTransition = errors.New("intent: illegal transition")
	ErrAbsorbing         = errors.New("state is absorbing")
	ErrUnknownState      = errors.New("intent: unknown state")
	ErrUnknownEvent      = errors.New("intent: unknown event")
)

// Edge is one legal transition: Event moves an intent in From to To.
type Edge struct {
	From  State
	Event Event
	To    State
}

// edges is the whole machine of DESIGN.md §2, one line per arrow. Choices where
// the diagram is terse:
//   - GATES_BLOCKED is legal from PROPOSED, HELD and AUTHORIZED: gates run first
//     at PROPOSED and are re-checked against live limits while held and at
//     execution (a revoked mandate, a spent budget). HOLD_REJECTED is legal
//     from HELD and from the two proofs of "not applied" (FAILED_TERMINAL,
//     CONFIRMED_NOT_APPLIED): a retry of those is held for the owner in
//     place, and the owner's rejection of it ends the intent BLOCKED, so
//     that "no" sticks (before, each identical request opened a new
//     approval).
//   - REOPENED from FAILED_TERMINAL is the second way back to AUTHORIZED. §1
//     names only CONFIRMED_NOT_APPLIED, but a definite rail rejection is as much a
//     proof of "not applied" as an exhausted listing (see ProvenNotApplied).
//   - QUARANTINED leaves only by its owner's resolution, made after checking
//     the rail: RESOLVED_APPLIED (the hold is posted, as on any APPLIED) or
//     RESOLVED_NOT_APPLIED, which ends BLOCKED, absorbing: the owner's word is
//     no proof of absence, so nothing is sent again on it (no edge to
//     AUTHORIZED), and the database refuses it while the rail has answered
//     one of the intent's attempts applied. §2 leaves QUARANTINED to an
//     operator "outside the machine"; an intent parked there kept its hold
//     and refused its action forever, with no audited way out.
//   - QUARANTINE is also legal from FAILED_TERMINAL and CONFIRMED_NOT_APPLIED:
//     a rail "applied" that arrives after the intent was settled as not
//     applied contradicts the ledger, and the intent stops for a person
//     instead of being sent again (A1).
//     IN_FLIGHT has no QUARANTINE edge: a rail idempotency_error (§4) goes
//     IN_FLIGHT →RAIL_AMBIGUOUS→ UNKNOWN →QUARANTINE→ QUARANTINED.
//   - A rail 409 "same key still running" is no event: the intent stays IN_FLIGHT.
var edges = map[State]map[Event]State{
	Proposed: {
		GatesPassed:  Authorized,
		GatesHeld:    Held,
		GatesBlocked: Blocked,
	},
	Held: {
		HoldReleased: Authorized,
		HoldRejected: Blocked,
		GatesBlocked: Blocked,
		Quarantine:   Quarantined,
	},
	Authorized: {
		AttemptStarted: InFlight,
		GatesBlocked:   Blocked,
		Quarantine:     Quarantined,
	},
	InFlight: {
		RailApplied:   Applied,
		RailRejected:  FailedTerminal,
		RailAmbiguous: Unknown,
		LeaseExpired:  Unknown,
	},
	FailedTerminal: {
		Reopened:     Authorized,
		HoldRejected: Blocked,
		Quarantine:   Quarantined,
	},
	Unknown: {
		ReconcileStarted: Reconciling,
		Quarantine:       Quarantined,
	},
	Reconciling: {
		FoundApplied:    Applied,
		ConfirmedAbsent: ConfirmedNotApplied,
		Inconclusive:    Unknown,
		Quarantine:      Quarantined,
	},
	ConfirmedNotApplied: {
		RetryAuthorized: Authorized,
		HoldRejected:    Blocked,
		Quarantine:      Quarantined,
	},
	Quarantined: {
		ResolvedApplied:    Applied,
		ResolvedNotApplied: Blocked,
	},
	// APPLIED and BLOCKED (absorbing) have no edges.
}

// Transition returns the state that event e moves an intent in state s to. On
// error it returns s itself, so a caller that drops the error cannot move the
// intent.
func Transition(s State, e Event) (State, error) {
	switch {
	case !s.Valid():
		return s, fmt.Errorf("%w %q (event %q)", ErrUnknownState, string(s), string(e))
	case !e.Valid():
		return s, fmt.Errorf("%w %q (state %s)", ErrUnknownEvent, string(e), s)
	case IsAbsorbing(s):
		return s, fmt.Errorf("%w: %w: event %s in state %s", ErrIllegalTransition, ErrAbsorbing, e, s)
	}
	next, ok := edges[s][e]
	if !ok {
		return s, fmt.Errorf("%w: event %s in state %s", ErrIllegalTransition, e, s)
	}
	return next, nil
}

// Edges returns every legal transition, ordered by From then Event in the order
// of States and Events. The slice is a fresh copy: the ledger generates its
// Postgres transition guard from it.
func Edges() []Edge {
	var out []Edge
	for from, byEvent := range edges {
		for ev, to := range byEvent {
			out = append(out, Edge{From: from, Event: ev, To: to})
		}
	}
	slices.SortFunc(out, func(a, b Edge) int {
		if c := stateOrder(a.From) - stateOrder(b.From); c != 0 {
			return c
		}
		return eventOrder(a.Event) - eventOrder(b.Event)
	})
	return out
}
