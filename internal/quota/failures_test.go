package quota

import (
	"errors"
	"testing"
	"time"
)

func TestFailuresBlockASourceAndAnIdentity(t *testing.T) {
	clk := newClock()
	f := NewFailures(
		Options{Rate: 0.5, Burst: 3, Now: clk.Now}, // per source: 3 failures, one forgiven per 2s
		Options{Rate: 0.1, Burst: 2, Now: clk.Now}, // per identity: 2 failures, one forgiven per 10s
	)
	if err := f.Check("10.0.0.1", "cred-a"); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	f.Note("10.0.0.1", "cred-a")
	f.Note("10.0.0.2", "cred-a")
	if blocked, wait := f.BlockedIdentity("cred-a"); !blocked || wait != 10*time.Second {
		t.Fatalf("identity after 2 failures from 2 sources: %v, %v; want blocked 10s", blocked, wait)
	}
	if blocked, _ := f.Blocked("10.0.0.1"); blocked {
		t.Fatal("one failure blocked the source")
	}
	err := f.Check("10.0.0.9", "cred-a")
	var ex *ExhaustedError
	if !errors.As(err, &ex) || !errors.Is(err, ErrExhausted) || ex.RetryAfter != 10*time.Second {
		t.Fatalf("Check of a blocked identity from a clean source = %v; want ExhaustedError 10s", err)
	}
	f.Note("10.0.0.1", "")
	f.Note("10.0.0.1", "")
	if blocked, wait := f.Blocked("10.0.0.1"); !blocked || wait != 2*time.Second {
		t.Fatalf("source after 3 failures: %v, %v; want blocked 2s", blocked, wait)
	}
	if err := f.Check("10.0.0.3", "cred-b"); err != nil {
		t.Fatalf("an unrelated source and identity are blocked: %v", err)
	}
	clk.Advance(2 * time.Second)
	if blocked, _ := f.Blocked("10.0.0.1"); blocked {
		t.Fatal("source still blocked after its wait")
	}
	if blocked, _ := f.BlockedIdentity("cred-a"); !blocked {
		t.Fatal("identity forgiven before its wait")
	}
	clk.Advance(8 * time.Second)
	if err := f.Check("10.0.0.1", "cred-a"); err != nil {
		t.Fatalf("after 10s: %v", err)
	}
}

func TestANilFailuresBlocksNothing(t *testing.T) {
	var f *Failures
	f.Note("s", "i")
	if err := f.Check("s", "i"); err != nil {
		t.Fatal(err)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want int64
	}{
		{"zero is at least one", 0, 1},
		{"a millisecond rounds up", time.Millisecond, 1},
		{"a whole second", time.Second, 1},
		{"just over rounds up", time.Second + time.Nanosecond, 2},
		{"minutes", 90 * time.Second, 90},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RetryAfterSeconds(tc.d); got != tc.want {
				t.Fatalf("RetryAfterSeconds(%v) = %d, want %d", tc.d, got, tc.want)
			}
		})
	}
}

// A guesser sharing a source with a legitimate caller (every agent of a pod
// is 127.0.0.1) blocks the source for new guesses, but not for a credential
// that has authenticated; and it gains nothing by presenting new
// credentials, which are each unknown.
func TestFailuresSharedSource(t *testing.T) {
	const pod = "127.0.0.1"
	tests := []struct {
		name string
		run  func(f *Failures) error
		want bool // refused
	}{
		{"guesses past the burst are refused, each with a new credential", func(f *Failures) error {
			for i := range 3 {
				f.Note(pod, "guess-"+string(rune('a'+i)))
			}
			return f.Check(pod, "guess-z")
		}, true},
		{"an authenticated credential is not locked out by another's failures", func(f *Failures) error {
			f.Admit("victim")
			for i := range 10 {
				f.Note(pod, "guess-"+string(rune('a'+i)))
			}
			return f.Check(pod, "victim")
		}, false},
		{"a credential never seen waits with the source", func(f *Failures) error {
			for i := range 3 {
				f.Note(pod, "guess-"+string(rune('a'+i)))
			}
			return f.Check(pod, "newcomer")
		}, true},
		{"an admitted credential that then fails loses its exemption", func(f *Failures) error {
			f.Admit("revoked-later")
			for range 3 {
				f.Note(pod, "other")
			}
			f.Note(pod, "revoked-later")
			return f.Check(pod, "revoked-later")
		}, true},
		{"Forget withdraws the exemption", func(f *Failures) error {
			f.Admit("expired")
			for range 3 {
				f.Note(pod, "")
			}
			f.Forget("expired")
			return f.Check(pod, "expired")
		}, true},
		{"an admitted credential is still held to its own bucket", func(f *Failures) error {
			f.Admit("mine")
			f.identity.Charge("mine")
			f.identity.Charge("mine")
			return f.Check("10.9.9.9", "mine")
		}, true},
		{"another source is untouched", func(f *Failures) error {
			for range 5 {
				f.Note(pod, "")
			}
			return f.Check("10.0.0.7", "someone")
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			f := NewFailures(Options{Rate: 0.1, Burst: 3, Now: clk.Now}, Options{Rate: 0.1, Burst: 2, Now: clk.Now})
			err := tc.run(f)
			if refused := errors.Is(err, ErrExhausted); refused != tc.want {
				t.Fatalf("refused = %v (%v), want %v", refused, err, tc.want)
			}
		})
	}
}

func TestFailuresRemembersABoundedNumberOfCredentials(t *testing.T) {
	f := NewFailures(Options{Rate: 1, Burst: 1}, Options{Rate: 1, Burst: 1, MaxKeys: 2})
	f.Admit("a")
	f.Admit("b")
	f.Known("a") // a is now the most recently used
	f.Admit("c")
	if !f.Known("a") || f.Known("b") || !f.Known("c") {
		t.Fatalf("known a=%v b=%v c=%v; want the least recently used (b) forgotten", f.Known("a"), f.Known("b"), f.Known("c"))
	}
	var nilF *Failures
	nilF.Admit("x")
	if nilF.Known("x") || nilF.Check("s", "x") != nil {
		t.Fatal("a nil Failures remembers or blocks")
	}
}
