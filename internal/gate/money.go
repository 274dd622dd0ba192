package gate

import (
	"math"

	moneyfmt "github.com/countersign/countersign/internal/money" // the tests have a money helper
)

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

// amount writes minor units of currency for a reason a person reads: in
// major units with the code, as the rail counts them ("600.00 USD",
// "1,500 JPY").
func amount(in Input, minor int64, currency string) string {
	return moneyfmt.ForRail(string(in.Rail)).Format(minor, inert(currency))
}
