package intent

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// illegal marks a (state, event) pair that Transition must refuse.
const illegal State = ""

// spec is DESIGN.md §2 written out by hand, every state × every event, so that a
// wrong, missing or extra edge in machine.go fails TestTransitionTable. Do not
// derive it from the package's own table.
var spec = map[State]map[Event]State{
	Proposed: {
		GatesPassed:        Authorized,
		GatesHeld:          Held,
		GatesBlocked:       Blocked,
		HoldReleased:       illegal,
		HoldRejected:       illegal,
		AttemptStarted:     illegal,
		RailApplied:        illegal,
		RailRejected:       illegal,
		RailAmbiguous:      illegal,
		LeaseExpired:       illegal,
		Reopened:           illegal,
		ReconcileStarted:   illegal,
		FoundApplied:       illegal,
		ConfirmedAbsent:    illegal,
		Inconclusive:       illegal,
		RetryAuthorized:    illegal,
		Quarantine:         illegal,
		ResolvedApplied:    illegal,
		ResolvedNotApplied: illegal,
	},
	Held: {
		GatesPassed:        illegal,
		GatesHeld:          illegal,
		GatesBlocked:       Blocked,
		HoldReleased:       Authorized,
		HoldRejected:       Blocked,
		AttemptStarted:     illegal,
		RailApplied:        illegal,
		RailRejected:       illegal,
		RailAmbiguous:      illegal,
		LeaseExpired:       illegal,
		Reopened:           illegal,
		ReconcileStarted:   illegal,
		FoundApplied:       illegal,
		ConfirmedAbsent:    illegal,
		Inconclusive:       illegal,
		RetryAuthorized:    illegal,
		Quarantine:         Quarantined,
		ResolvedApplied:    illegal,
		ResolvedNotApplied: illegal,
	},
	Authorized: {
		GatesPassed:        illegal,
		GatesHeld:          illegal,
		GatesBlocked:       Blocked,
		HoldReleased:       illegal,
		HoldRejected:       illegal,
		AttemptStarted:     InFlight,
		RailApplied:        illegal,
		RailRejected:       illegal,
		RailAmbiguous:      illegal,
		LeaseExpired:       illegal,
		Reopened:           illegal,
		ReconcileStarted:   illegal,
		FoundApplied:       illegal,
		ConfirmedAbsent:    illegal,
		Inconclusive:       illegal,
		RetryAuthorized:    illegal,
		Quarantine:         Quarantined,
		ResolvedApplied:    illegal,
		ResolvedNotApplied: illegal,
	},
	InFlight: {
		GatesPassed:        illegal,
		GatesHeld:          illegal,
		GatesBlocked:       illegal,
		HoldReleased:       illegal,
		HoldRejected:       illegal,
		AttemptStarted:     illegal,
		RailApplied:        Applied,
		RailRejected:       FailedTerminal,
		RailAmbiguous:      Unknown,
		LeaseExpired:       Unknown,
		Reopened:           illegal,
		ReconcileStarted:   illegal,
		FoundApplied:       illegal,
		ConfirmedAbsent:    illegal,
		Inconclusive:       illegal,
		RetryAuthorized:    illegal,
		Quarantine:         illegal,
		ResolvedApplied:    illegal,
		ResolvedNotApplied: illegal,
	},
	Applied: {
		GatesPassed:        illegal,
		GatesHeld:          illegal,
		GatesBlocked:       illegal,
		HoldReleased:       illegal,
		HoldRejected:       illegal,
		AttemptStarted:     illegal,
		RailApplied:        illegal,
		RailRejected:       illegal,
		RailAmbiguous:      illegal,
		LeaseExpired:       illegal,
		Reopened:           illegal,
		ReconcileStarted:   illegal,
		FoundApplied:       illegal,
		ConfirmedAbsent:    illegal,
		Inconclusive:       illegal,
		RetryAuthorized:    illegal,
		Quarantine:         illegal,
		ResolvedApplied:    illegal,
		ResolvedNotApplied: illegal,
	},
	FailedTerminal: {
		GatesPassed:        illegal,
		GatesHeld:          illegal,
		GatesBlocked:       illegal,
		HoldReleased:       illegal,
		HoldRejected:       Blocked,
		AttemptStarted:     illegal,
		RailApplied:        illegal,
		RailRejected:       illegal,
		RailAmbiguous:      illegal,
		LeaseExpired:       illegal,
		Reopened:           Authorized,
		ReconcileStarted:   illegal,
		FoundApplied:       illegal,
		ConfirmedAbsent:    illegal,
		Inconclusive:       illegal,
		RetryAuthorized:    illegal,
		Quarantine:         Quarantined,
		ResolvedApplied:    illegal,
		ResolvedNotApplied: illegal,
	},
	Unknown: {
		GatesPassed:        illegal,
		GatesHeld:          illegal,
		GatesBlocked:       illegal,
		HoldReleased:       illegal,
		HoldRejected:       illegal,
		AttemptStarted:     illegal,
		RailApplied:        illegal,
		RailRejected:       illegal,
		RailAmbiguous:      illegal,
		LeaseExpired:       illegal,
		Reopened:           illegal,
		ReconcileStarted:   Reconciling,
		FoundApplied:       illegal,
		ConfirmedAbsent:    illegal,
		Inconclusive:       illegal,
		RetryAuthorized:    illegal,
		Quarantine:         Quarantined,
		ResolvedApplied:    illegal,
		ResolvedNotApplied: illegal,
	},
	Reconciling: {
		GatesPassed:        illegal,
		GatesHeld:          illegal,
		GatesBlocked:       illegal,
		HoldReleased:       illegal,
		HoldRejected:       illegal,
		AttemptStarted:     illegal,
		RailApplied:        illegal,
		RailRejected:       illegal,
		RailAmbiguous:      illegal,
		LeaseExpired:       illegal,
		Reopened:           illegal,
		ReconcileStarted:   illegal,
		FoundApplied:       Applied,
		ConfirmedAbsent:    ConfirmedNotApplied,
		Inconclusive:       Unknown,
		RetryAuthorized:    illegal,
		Quarantine:         Quarantined,
		ResolvedApplied:    illegal,
		ResolvedNotApplied: illegal,
	},
	ConfirmedNotApplied: {
		GatesPassed:        illegal,
		GatesHeld:          illegal,
		GatesBlocked:       illegal,
		HoldReleased:       illegal,
		HoldRejected:       Blocked,
		AttemptStarted:     illegal,
		RailApplied:        illegal,
		RailRejected:       illegal,
		RailAmbiguous:      illegal,
		LeaseExpired:       illegal,
		Reopened:           illegal,
		ReconcileStarted:   illegal,
		FoundApplied:       illegal,
		ConfirmedAbsent:    illegal,
		Inconclusive:       illegal,
		RetryAuthorized:    Authorized,
		Quarantine:         Quarantined,
		ResolvedApplied:    illegal,
		ResolvedNotApplied: illegal,
	},
	Blocked: {
		GatesPassed:        illegal,
		GatesHeld:          illegal,
		GatesBlocked:       illegal,
		HoldReleased:       illegal,
		HoldRejected:       illegal,
		AttemptStarted:     illegal,
		RailApplied:        illegal,
		RailRejected:       illegal,
		RailAmbiguous:      illegal,
		LeaseExpired:       illegal,
		Reopened:           illegal,
		ReconcileStarted:   illegal,
		FoundApplied:       illegal,
		ConfirmedAbsent:    illegal,
		Inconclusive:       illegal,
		RetryAuthorized:    illegal,
		Quarantine:         illegal,
		ResolvedApplied:    illegal,
		ResolvedNotApplied: illegal,
	},
	Quarantined: {
		GatesPassed:        illegal,
		GatesHeld:          illegal,
		GatesBlocked:       illegal,
		HoldReleased:       illegal,
		HoldRejected:       illegal,
		AttemptStarted:     illegal,
		RailApplied:        illegal,
		RailRejected:       illegal,
		RailAmbiguous:      illegal,
		LeaseExpired:       illegal,
		Reopened:           illegal,
		ReconcileStarted:   illegal,
		FoundApplied:       illegal,
		ConfirmedAbsent:    illegal,
		Inconclusive:       illegal,
		RetryAuthorized:    illegal,
		Quarantine:         illegal,
		ResolvedApplied:    Applied,
		ResolvedNotApplied: Blocked,
	},
}

func TestStateAndEventValues(t *testing.T) {
	// The values are stored in Postgres and mirrored in the proto enum.
	wantStates := []State{"PROPOSED", "HELD", "AUTHORIZED", "IN_FLIGHT", "APPLIED",
		"FAILED_TERMINAL", "UNKNOWN", "RECONCILING", "CONFIRMED_NOT_APPLIED", "BLOCKED", "QUARANTINED"}
	wantEvents := []Event{"GATES_PASSED", "GATES_HELD", "GATES_BLOCKED", "HOLD_RELEASED",
		"HOLD_REJECTED", "ATTEMPT_STARTED", "RAIL_APPLIED", "RAIL_REJECTED", "RAIL_AMBIGUOUS",
		"LEASE_EXPIRED", "REOPENED", "RECONCILE_STARTED", "FOUND_APPLIED", "CONFIRMED_ABSENT",
		"INCONCLUSIVE", "RETRY_AUTHORIZED", "QUARANTINE", "RESOLVED_APPLIED", "RESOLVED_NOT_APPLIED"}
	if got := States(); !slices.Equal(got, wantStates) {
		t.Errorf("States() = %v, want %v", got, wantStates)
	}
	if got := Events(); !slices.Equal(got, wantEvents) {
		t.Errorf("Events() = %v, want %v", got, wantEvents)
	}
	for _, s := range wantStates {
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
	}
	for _, e := range wantEvents {
		if !e.Valid() {
			t.Errorf("%s.Valid() = false", e)
		}
	}
	for _, s := range []State{"", "proposed", "PROPOSED ", "RAIL_APPLIED"} {
		if s.Valid() {
			t.Errorf("State(%q).Valid() = true", s)
		}
	}
	for _, e := range []Event{"", "gates_passed", "RAIL_IN_PROGRESS", "APPLIED"} {
		if e.Valid() {
			t.Errorf("Event(%q).Valid() = true", e)
		}
	}

	// Copies: a caller cannot edit the package's lists.
	States()[0] = "X"
	Events()[0] = "X"
	if States()[0] != Proposed || Events()[0] != GatesPassed {
		t.Error("States/Events return shared slices")
	}
}

func TestTransitionTable(t *testing.T) {
	if len(spec) != 11 {
		t.Fatalf("spec has %d states, want 11", len(spec))
	}
	for _, s := range States() {
		row, ok := spec[s]
		if !ok || len(row) != 19 {
			t.Fatalf("spec row %s has %d events, want 19", s, len(row))
		}
		for _, e := range Events() {
			want, ok := row[e]
			if !ok {
				t.Fatalf("spec misses %s/%s", s, e)
			}
			t.Run(string(s)+"/"+string(e), func(t *testing.T) {
				got, err := Transition(s, e)
				if want == illegal {
					if !errors.Is(err, ErrIllegalTransition) {
						t.Fatalf("Transition = (%s, %v), want ErrIllegalTransition", got, err)
					}
					if got != s {
						t.Errorf("refused transition returned %s, want the unchanged %s", got, s)
					}
					if msg := err.Error(); !strings.Contains(msg, string(s)) || !strings.Contains(msg, string(e)) {
						t.Errorf("error %q does not name state and event", msg)
					}
					if IsAbsorbing(s) != errors.Is(err, ErrAbsorbing) {
						t.Errorf("errors.Is(err, ErrAbsorbing) = %v in %s", errors.Is(err, ErrAbsorbing), s)
					}
					return
				}
				if err != nil || got != want {
					t.Fatalf("Transition = (%s, %v), want (%s, nil)", got, err, want)
				}
			})
		}
	}
}

func TestTransitionUnknownValues(t *testing.T) {
	tests := []struct {
		name    string
		s       State
		e       Event
		wantErr error
	}{
		{"empty state", "", GatesPassed, ErrUnknownState},
		{"lower-case state", "proposed", GatesPassed, ErrUnknownState},
		{"unknown state and event", "NOPE", "NOPE", ErrUnknownState},
		{"empty event", Proposed, "", ErrUnknownEvent},
		{"rail in progress is no event", InFlight, "RAIL_IN_PROGRESS", ErrUnknownEvent},
		{"unknown event in absorbing state", Applied, "NOPE", ErrUnknownEvent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Transition(tc.s, tc.e)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if errors.Is(err, ErrIllegalTransition) {
				t.Errorf("err %v also matches ErrIllegalTransition", err)
			}
			if got != tc.s {
				t.Errorf("returned %q, want the unchanged %q", got, tc.s)
			}
		})
	}
}

func TestEdgesMatchTransition(t *testing.T) {
	edges := Edges()
	legal := map[[2]string]State{}
	for i, ed := range edges {
		if _, dup := legal[[2]string{string(ed.From), string(ed.Event)}]; dup {
			t.Errorf("duplicate edge %v", ed)
		}
		legal[[2]string{string(ed.From), string(ed.Event)}] = ed.To
		if !ed.To.Valid() {
			t.Errorf("edge %v leads to an invalid state", ed)
		}
		if i > 0 {
			prev := edges[i-1]
			if stateOrder(prev.From) > stateOrder(ed.From) ||
				(prev.From == ed.From && eventOrder(prev.Event) >= eventOrder(ed.Event)) {
				t.Errorf("Edges not sorted: %v before %v", prev, ed)
			}
		}
	}
	for _, s := range States() {
		for _, e := range Events() {
			got, err := Transition(s, e)
			to, ok := legal[[2]string{string(s), string(e)}]
			switch {
			case ok && (err != nil || got != to):
				t.Errorf("Edges has %s -%s-> %s but Transition = (%s, %v)", s, e, to, got, err)
			case !ok && err == nil:
				t.Errorf("Transition allows %s -%s-> %s, missing from Edges", s, e, got)
			}
		}
	}
	if !slices.Equal(edges, Edges()) {
		t.Error("Edges is not deterministic")
	}
	edges[0].To = Applied
	if Edges()[0].To == Applied {
		t.Error("Edges returns a shared slice")
	}
}

func TestHelpers(t *testing.T) {
	for _, s := range States() {
		wantAbsorbing := s == Applied || s == Blocked
		if IsAbsorbing(s) != wantAbsorbing {
			t.Errorf("IsAbsorbing(%s) = %v", s, !wantAbsorbing)
		}
		wantProven := s == FailedTerminal || s == ConfirmedNotApplied
		if ProvenNotApplied(s) != wantProven {
			t.Errorf("ProvenNotApplied(%s) = %v", s, !wantProven)
		}
	}
	for _, e := range Events() {
		if StartsAttempt(e) != (e == AttemptStarted) {
			t.Errorf("StartsAttempt(%s) = %v", e, StartsAttempt(e))
		}
	}
}

func FuzzTransition(f *testing.F) {
	for _, s := range States() {
		for _, e := range Events() {
			f.Add(string(s), string(e))
		}
	}
	f.Add("", "")
	f.Add("IN_FLIGHT", "RAIL_IN_PROGRESS")
	f.Add("APPLIED\x00", "RAIL_APPLIED")
	f.Fuzz(func(t *testing.T, s, e string) {
		got, err := Transition(State(s), Event(e))
		if err != nil {
			if got != State(s) {
				t.Fatalf("refused transition returned %q, want the unchanged %q", got, s)
			}
			return
		}
		if !State(s).Valid() || !Event(e).Valid() {
			t.Fatalf("Transition(%q, %q) accepted an unknown value", s, e)
		}
		if !got.Valid() {
			t.Fatalf("Transition(%q, %q) = invalid state %q", s, e, got)
		}
		if IsAbsorbing(State(s)) {
			t.Fatalf("Transition(%q, %q) left an absorbing state", s, e)
		}
	})
}
