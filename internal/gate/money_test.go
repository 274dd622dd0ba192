package gate

import (
	"math"
	"math/big"
	"testing"

	"pgregory.net/rapid"
)

func TestAddMinor(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []int64
		sum  int64
		ok   bool
	}{
		{"none", nil, 0, true},
		{"small", []int64{1, 2, 3}, 6, true},
		{"up to the max", []int64{math.MaxInt64 - 1, 1}, math.MaxInt64, true},
		{"one past the max", []int64{math.MaxInt64, 1}, 0, false},
		{"two halves past the max", []int64{math.MaxInt64/2 + 1, math.MaxInt64/2 + 1}, 0, false},
		{"negative", []int64{5, -1}, 0, false},
		{"negative that would mask an overflow", []int64{math.MaxInt64, 1, -1}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum, ok := addMinor(tc.xs...)
			if sum != tc.sum || ok != tc.ok {
				t.Fatalf("addMinor(%v) = %d, %v; want %d, %v", tc.xs, sum, ok, tc.sum, tc.ok)
			}
		})
	}
}

// addMinor agrees with exact arithmetic: ok exactly when every operand is
// non-negative and the true sum fits in int64, and then the sum is exact.
func TestAddMinorIsExact(t *testing.T) {
	amount := rapid.OneOf(rapid.Int64Range(-3, 1000), rapid.Int64Range(0, math.MaxInt64), rapid.Int64Range(math.MaxInt64-1000, math.MaxInt64), rapid.Int64())
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(amount, 0, 5).Draw(t, "xs")
		exact, neg := new(big.Int), false
		for _, x := range xs {
			exact.Add(exact, big.NewInt(x))
			neg = neg || x < 0
		}
		sum, ok := addMinor(xs...)
		if want := !neg && exact.IsInt64(); ok != want {
			t.Fatalf("addMinor(%v) ok = %v, want %v (exact sum %s)", xs, ok, want, exact)
		}
		if ok && sum != exact.Int64() {
			t.Fatalf("addMinor(%v) = %d, want %s", xs, sum, exact)
		}
	})
}
