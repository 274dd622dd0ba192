package bench

import (
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"median of 1..100", d, 0.50, 50 * time.Millisecond},
		{"p99 of 1..100", d, 0.99, 99 * time.Millisecond},
		{"max", d, 1, 100 * time.Millisecond},
		{"one sample", d[:1], 0.99, time.Millisecond},
		{"p50 of two", d[:2], 0.50, time.Millisecond},
		{"p99 of ten is the largest", d[:10], 0.99, 10 * time.Millisecond},
		{"empty", nil, 0.5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.in, tc.p); got != tc.want {
				t.Fatalf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
	// summarise sorts a copy and leaves its input alone.
	in := []time.Duration{3, 1, 2}
	if s := summarise(in); s.p50 != 2 || s.p99 != 3 || s.n != 3 || in[0] != 3 {
		t.Fatalf("summarise = %+v, input now %v", s, in)
	}
}

func TestParseLSN(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0/0", 0, true},
		{"0/16B3748", 0x16B3748, true},
		{"16/B374D848", 0x16<<32 | 0xB374D848, true},
		{"16B374D848", 0, false},
		{"x/1", 0, false},
	} {
		got, err := parseLSN(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseLSN(%q) = %#x, %v", tc.in, got, err)
		}
	}
}
