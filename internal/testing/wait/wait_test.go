package wait

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	var n atomic.Int32
	if !Until(time.Minute, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("a condition that comes true was reported false")
	}
	if n.Load() != 3 {
		t.Fatalf("checked %d times, want 3 (once at once, then per tick until true)", n.Load())
	}
	if Until(3*Tick, func() bool { return false }) {
		t.Fatal("a condition that never holds was reported true")
	}
	if !Until(0, func() bool { return true }) {
		t.Fatal("a condition true at once needs no time")
	}
}
