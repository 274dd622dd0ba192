package quota

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testing/testclock"
)

func newClock() *testclock.Clock { return testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) }

func TestAllowSpendsTheBurstThenRefillsAtTheRate(t *testing.T) {
	clk := newClock()
	l := NewLimiter(Options{Rate: 2, Burst: 3, Now: clk.Now}) // one token per 500ms
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("call %d of the burst refused", i+1)
		}
	}
	ok, wait := l.Allow("a")
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("fourth call = %v, %v; want refused for 500ms", ok, wait)
	}
	clk.Advance(200 * time.Millisecond)
	if ok, wait := l.Allow("a"); ok || wait != 300*time.Millisecond {
		t.Fatalf("after 200ms = %v, %v; want refused for 300ms more", ok, wait)
	}
	clk.Advance(300 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("refused after the wait it was told")
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another key shares a's bucket")
	}
	clk.Advance(time.Hour)
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("after an hour, call %d refused: the bucket must refill to its burst", i+1)
		}
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("an idle hour must not bank more than the burst")
	}
}

func TestBlockedNeitherSpendsNorRemembers(t *testing.T) {
	clk := newClock()
	l := NewLimiter(Options{Rate: 1, Burst: 1, Now: clk.Now})
	if blocked, _ := l.Blocked("new"); blocked || l.Len() != 0 {
		t.Fatalf("unknown key: blocked=%v len=%d; want not blocked, not remembered", blocked, l.Len())
	}
	for range 5 {
		if blocked, _ := l.Blocked("a"); blocked {
			t.Fatal("Blocked spent a token")
		}
	}
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("first Allow refused")
	}
	blocked, wait := l.Blocked("a")
	if !blocked || wait != time.Second {
		t.Fatalf("Blocked = %v, %v; want blocked for 1s", blocked, wait)
	}
}

func TestChargeEmptiesButNeverOverdraws(t *testing.T) {
	clk := newClock()
	l := NewLimiter(Options{Rate: 0.1, Burst: 2, Now: clk.Now}) // one token per 10s
	for range 10 {
		l.Charge("a")
	}
	blocked, wait := l.Blocked("a")
	if !blocked || wait != 10*time.Second {
		t.Fatalf("after ten charges Blocked = %v, %v; want blocked for 10s (not 90s)", blocked, wait)
	}
	clk.Advance(10 * time.Second)
	if blocked, _ := l.Blocked("a"); blocked {
		t.Fatal("still blocked after the wait")
	}
}

func TestTheKeySetIsBoundedAndForgetsTheLeastRecentlyUsed(t *testing.T) {
	clk := newClock()
	l := NewLimiter(Options{Rate: 1, Burst: 1, MaxKeys: 3, Now: clk.Now})
	for _, k := range []string{"a", "b", "c"} {
		l.Allow(k) // each now empty
	}
	l.Allow("a") // a is the most recently used again (and still empty)
	for i := range 1000 {
		l.Allow(fmt.Sprintf("attacker-%d", i))
		if n := l.Len(); n > 3 {
			t.Fatalf("%d keys remembered, bound is 3", n)
		}
	}
	if l.Len() != 3 {
		t.Fatalf("Len = %d, want 3", l.Len())
	}
	l2 := NewLimiter(Options{Rate: 1, Burst: 1, MaxKeys: 3, Now: clk.Now})
	for _, k := range []string{"a", "b", "c"} {
		l2.Allow(k)
	}
	l2.Allow("a")
	l2.Allow("d") // evicts b, the least recently used
	if blocked, _ := l2.Blocked("a"); !blocked {
		t.Error("a was used recently and must still be remembered (blocked)")
	}
	if blocked, _ := l2.Blocked("b"); blocked {
		t.Error("b was the least recently used and must have been forgotten")
	}
}

func TestAnOffLimiterAllowsEverything(t *testing.T) {
	tests := []struct {
		name string
		l    *Limiter
	}{
		{"nil", nil},
		{"zero value", &Limiter{}},
		{"zero rate", NewLimiter(Options{Rate: 0, Burst: 1})},
		{"negative rate", NewLimiter(Options{Rate: -1, Burst: 1})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range 100 {
				tc.l.Charge("k")
				if ok, _ := tc.l.Allow("k"); !ok {
					t.Fatal("refused")
				}
			}
			if blocked, _ := tc.l.Blocked("k"); blocked || tc.l.Len() != 0 {
				t.Fatal("an off limiter blocks or remembers")
			}
		})
	}
}

func TestAClockSteppingBackRefillsNothing(t *testing.T) {
	clk := newClock()
	l := NewLimiter(Options{Rate: 1, Burst: 1, Now: clk.Now})
	l.Allow("a")
	clk.Advance(-time.Hour)
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("a backwards clock refilled the bucket")
	}
	clk.Advance(time.Hour + time.Second)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("refused a second after the original time")
	}
}

func TestConcurrentCallersShareOneBurst(t *testing.T) {
	clk := newClock()
	l := NewLimiter(Options{Rate: 1, Burst: 50, Now: clk.Now})
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if ok, _ := l.Allow("k"); ok {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 50 {
		t.Fatalf("%d calls allowed with a frozen clock, want exactly the burst of 50", n)
	}
}
