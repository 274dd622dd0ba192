package console

import (
	"fmt"
	"testing"
	"time"
)

func TestUsedStates(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	u := newUsedStates(3)
	if !u.claim("s1", now.Add(10*time.Minute), now) {
		t.Fatal("a fresh state is refused")
	}
	if u.claim("s1", now.Add(10*time.Minute), now.Add(time.Minute)) {
		t.Fatal("a state is claimed twice")
	}
	// Expired states are forgotten first; they could not be opened anyway.
	if !u.claim("s2", now.Add(2*time.Minute), now) || !u.claim("s3", now.Add(3*time.Minute), now) {
		t.Fatal("fresh states refused")
	}
	later := now.Add(150 * time.Second) // s2 has expired
	if !u.claim("s4", now.Add(12*time.Minute), later) || u.claim("s1", now.Add(10*time.Minute), later) || u.claim("s3", now.Add(3*time.Minute), later) {
		t.Fatal("forgot a live state to make room while an expired one was there")
	}
	// Full of live states: the one that expires first (s3) goes.
	if !u.claim("s5", now.Add(13*time.Minute), later) {
		t.Fatal("a full set refused a fresh state")
	}
	if u.claim("s1", now.Add(10*time.Minute), later) || u.claim("s4", now.Add(12*time.Minute), later) || u.claim("s5", now.Add(13*time.Minute), later) {
		t.Fatal("a full set forgot a state other than the one expiring first")
	}
	if len(u.until) != 3 || len(u.expiry) != 3 {
		t.Fatalf("remembers %d states (%d in the heap), want the bound, 3", len(u.until), len(u.expiry))
	}
	for i := range 100 {
		u.claim(fmt.Sprint("x", i), now.Add(20*time.Minute), later)
	}
	if len(u.until) != 3 || len(u.expiry) != 3 {
		t.Fatalf("remembers %d states (%d in the heap) after a flood, want 3", len(u.until), len(u.expiry))
	}
}
