package quota

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
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

// One owner authenticating without end (a console sign-in mints a new
// session every time) churns only its own remembered credentials: another
// owner's stay exempt from their shared source's block.
func TestFailuresKnownCredentialsArePerOwner(t *testing.T) {
	const pod = "127.0.0.1"
	clk := newClock()
	f := NewFailures(Options{Rate: 0.1, Burst: 3, Now: clk.Now}, Options{Rate: 0.1, Burst: 3, Now: clk.Now, MaxKeys: 4 * DefaultKnownPerOwner})
	f.AdmitFor("own_alice", "alice-token")
	f.AdmitFor("own_alice", "alice-session")
	for range 3 {
		f.Note(pod, "")
	}
	for i := range 10 * f.known.max {
		f.AdmitFor("own_bob", fmt.Sprintf("bob-session-%d", i))
	}
	for _, k := range []string{"alice-token", "alice-session"} {
		if err := f.Check(pod, k); err != nil {
			t.Errorf("%s after another owner's %d sign-ins: %v", k, 10*f.known.max, err)
		}
	}
	all, bobs := f.known.len("own_bob")
	if bobs != DefaultKnownPerOwner || all != DefaultKnownPerOwner+2 {
		t.Errorf("remembered %d in all, %d of bob's; want bob's bounded at %d", all, bobs, DefaultKnownPerOwner)
	}
	if newest := fmt.Sprintf("bob-session-%d", 10*f.known.max-1); !f.Known(newest) || f.Known("bob-session-0") {
		t.Error("bob's partition does not keep his newest and forget his oldest")
	}
}

// The set as a whole stays bounded: when it is full, the key forgotten is
// the oldest of the least recently active owner; a key admitted for another
// owner moves; a partition emptied by Note or Forget is gone.
func TestKnownSetBounds(t *testing.T) {
	s := newKnownSet(4, 2)
	s.add("a", "a1")
	s.add("a", "a2")
	s.add("b", "b1")
	s.add("b", "b2")
	s.has("a1") // a is now the most recently active, and a1 its newest
	s.add("c", "c1")
	if !s.has("a1") || !s.has("a2") || s.has("b1") || !s.has("b2") || !s.has("c1") {
		t.Fatal("a full set did not forget the oldest key of the least recently active owner")
	}
	s.add("c", "a2") // now c's
	if all, as := s.len("a"); all != 4 || as != 1 {
		t.Fatalf("after moving a2: %d in all, %d of a's", all, as)
	}
	s.add("c", "c3") // c is full: its own oldest (c1) goes
	if s.has("c1") || !s.has("a2") || !s.has("c3") {
		t.Fatal("a full partition did not forget its own oldest")
	}
	s.remove("a1")
	if _, ok := s.byOwner["a"]; ok {
		t.Fatal("an emptied partition is kept")
	}
	var nilSet *knownSet
	nilSet.add("a", "x")
	if nilSet.has("x") {
		t.Fatal("a nil set remembers")
	}
}

// Whatever is admitted, forgotten or looked up, the set's bounds and its
// indexes hold.
func TestKnownSetInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxKeys := rapid.IntRange(1, 12).Draw(t, "max")
		perOwner := rapid.IntRange(1, 6).Draw(t, "perOwner")
		s := newKnownSet(maxKeys, perOwner)
		owners := []string{"", "a", "b", "c"}
		for range rapid.IntRange(0, 200).Draw(t, "steps") {
			key := fmt.Sprint(rapid.IntRange(0, 20).Draw(t, "key"))
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				owner := rapid.SampledFrom(owners).Draw(t, "owner")
				s.add(owner, key)
				if !s.has(key) {
					t.Fatalf("%s not remembered right after add", key)
				}
			case 1:
				s.remove(key)
				if s.has(key) {
					t.Fatalf("%s remembered after remove", key)
				}
			default:
				s.has(key)
			}
			total := 0
			for _, o := range owners {
				_, n := s.len(o)
				limit := min(perOwner, maxKeys)
				if o == "" {
					limit = maxKeys
				}
				if n > limit {
					t.Fatalf("owner %q holds %d, over %d", o, n, limit)
				}
				total += n
			}
			if all, _ := s.len(""); all != total || all != len(s.byKey) || all > maxKeys || s.parts.Len() != len(s.byOwner) {
				t.Fatalf("counts: n=%d, partitions sum %d, index %d, max %d", all, total, len(s.byKey), maxKeys)
			}
		}
	})
}
