package gate

import "math"

// addMinor sums amounts in minor units. ok is false when an operand is
// negative or the sum would pass math.MaxInt64: callers refuse with a
// precise reason rather than let the sum wrap negative and slip under a
// limit.
func addMinor(xs ...int64) (sum int64, ok bool) {
	for _, x := range xs {
		if x < 0 || x > math.MaxInt64-sum {
			return 0, false
		}
		sum += x
	}
	return sum, true
}
