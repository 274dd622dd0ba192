package freeport

import (
	"net"
	"strconv"
	"testing"
)

// An address is on loopback, below the ephemeral range, and bindable.
func TestAddrIsFreeAndBelowTheEphemeralRange(t *testing.T) {
	for range 50 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("Addr() = %q (%v)", addr, err)
		}
		if p, _ := strconv.Atoi(port); p < low || p >= 32768 {
			t.Fatalf("port %d is outside [%d, 32768)", p, low)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("Addr() = %s, but it cannot be bound: %v", addr, err)
		}
		_ = l.Close()
	}
}

// A port in use is never returned.
func TestAddrSkipsAPortInUse(t *testing.T) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	taken := map[string]bool{}
	for p := low; p < low+200; p++ {
		addr := "127.0.0.1:" + strconv.Itoa(p)
		if l, err := net.Listen("tcp", addr); err == nil {
			held = append(held, l)
			taken[addr] = true
		}
	}
	for range 200 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if taken[addr] {
			t.Fatalf("Addr() returned %s, which is in use", addr)
		}
	}
}

// One process never gets the same port twice, though the first is not yet
// bound when the next is drawn.
func TestAddrNeverRepeatsInAProcess(t *testing.T) {
	seen := map[string]bool{}
	for range 3000 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("Addr() returned %s twice", addr)
		}
		seen[addr] = true
	}
}
