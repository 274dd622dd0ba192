package intent

import (
	"errors"
	"testing"

	"pgregory.net/rapid"
)

// walk is one intent driven by Transition from PROPOSED, with the history the
// invariants need.
type walk struct {
	state      State
	attemptSeq int // I5: incremented on every accepted ATTEMPT_STARTED
	// exposed: an attempt reached the rail (IN_FLIGHT, UNKNOWN, RECONCILING) and
	// no proven-not-applied state has been seen since, so it may have applied.
	exposed bool
}

// nextEvent draws the next event. Half the time it is one that spec says is
// legal here and does not end the walk in BLOCKED or QUARANTINED, so walks reach
// reconciliation and second attempts; otherwise it is any legal event, or any
// event at all (mostly illegal ones, which must change nothing).
func nextEvent(t *rapid.T, s State) Event {
	var legal, progress []Event
	for _, e := range Events() {
		switch to := spec[s][e]; to {
		case illegal:
		case Blocked, Quarantined:
			legal = append(legal, e)
		default:
			legal = append(legal, e)
			progress = append(progress, e)
		}
	}
	switch mode := rapid.IntRange(0, 9).Draw(t, "mode"); {
	case mode < 5 && len(progress) > 0:
		return rapid.SampledFrom(progress).Draw(t, "progressEvent")
	case mode < 7 && len(legal) > 0:
		return rapid.SampledFrom(legal).Draw(t, "legalEvent")
	default:
		return rapid.SampledFrom(Events()).Draw(t, "event")
	}
}

// step applies e and checks the invariants of DESIGN.md §1 on the result.
func (w *walk) step(t *rapid.T, e Event) {
	prev := w.state
	next, err := Transition(prev, e)
	if err != nil {
		if !errors.Is(err, ErrIllegalTransition) {
			t.Fatalf("%s -%s->: unexpected error kind %v", prev, e, err)
		}
		if next != prev {
			t.Fatalf("%s -%s-> refused but returned %s", prev, e, next)
		}
		return
	}

	// I4: APPLIED and BLOCKED never change.
	if IsAbsorbing(prev) {
		t.Fatalf("left absorbing %s via %s to %s", prev, e, next)
	}

	// The only edge into a rail call is AUTHORIZED -ATTEMPT_STARTED-> IN_FLIGHT.
	if (next == InFlight) != StartsAttempt(e) {
		t.Fatalf("%s -%s-> %s: IN_FLIGHT must be entered exactly by ATTEMPT_STARTED", prev, e, next)
	}
	if next == InFlight && prev != Authorized {
		t.Fatalf("entered IN_FLIGHT from %s", prev)
	}

	// I3: from IN_FLIGHT, UNKNOWN or RECONCILING there is no way back to
	// AUTHORIZED or IN_FLIGHT except through a proven-not-applied state. §1
	// names only CONFIRMED_NOT_APPLIED; §2 also reopens FAILED_TERMINAL, a
	// definite rail rejection and so equally proven not applied.
	if (next == Authorized || next == InFlight) && w.exposed {
		t.Fatalf("%s -%s-> %s while the last attempt may have been applied", prev, e, next)
	}
	if next == Authorized && w.attemptSeq > 0 &&
		prev != ConfirmedNotApplied && prev != FailedTerminal {
		t.Fatalf("after an attempt, entered AUTHORIZED from %s (want CONFIRMED_NOT_APPLIED or FAILED_TERMINAL)", prev)
	}

	// I5: attempts start only from AUTHORIZED, attempt_seq strictly increases,
	// and two attempts are separated by a proven-not-applied state.
	if StartsAttempt(e) {
		if prev != Authorized {
			t.Fatalf("attempt started from %s", prev)
		}
		if w.exposed {
			t.Fatalf("attempt %d started before attempt %d was proven not applied", w.attemptSeq+1, w.attemptSeq)
		}
		w.attemptSeq++
	}

	switch next {
	case InFlight, Unknown, Reconciling:
		w.exposed = true
	case ConfirmedNotApplied, FailedTerminal:
		w.exposed = false
	}
	w.state = next
}

func TestPropertyRandomWalks(t *testing.T) {
	seen := map[State]bool{}
	maxAttempts := 0
	rapid.Check(t, func(t *rapid.T) {
		// Several independent intents per check, for more paths per run.
		for range rapid.IntRange(1, 8).Draw(t, "intents") {
			w := walk{state: Proposed}
			for range rapid.IntRange(1, 300).Draw(t, "steps") {
				seen[w.state] = true
				w.step(t, nextEvent(t, w.state))
			}
			seen[w.state] = true
			maxAttempts = max(maxAttempts, w.attemptSeq)

			// I4 once more: an absorbing state refuses every event.
			if IsAbsorbing(w.state) {
				for _, e := range Events() {
					if got, err := Transition(w.state, e); !errors.Is(err, ErrAbsorbing) || got != w.state {
						t.Fatalf("absorbing %s -%s-> (%s, %v)", w.state, e, got, err)
					}
				}
			}
		}
	})

	// Guard against a vacuous property: the walks must have visited every state
	// and made a second attempt after a proven-not-applied state.
	for _, s := range States() {
		if !seen[s] {
			t.Errorf("random walks never reached %s", s)
		}
	}
	if maxAttempts < 2 {
		t.Errorf("no random walk made a second attempt (max attempt_seq %d)", maxAttempts)
	}
}
