package gate

import (
	"math"
	"math/big"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/countersign/countersign/internal/sik"
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

// Reasons write amounts in the currency's major units with its code, as the
// action's rail counts them: never "60000 USD" for 600.00 USD.
func TestReasonsWriteMajorUnits(t *testing.T) {
	refund := func(currency string, rail sik.Rail, amount, refundable int64) Input {
		in := refundIn()
		in.Rail = rail
		in.Action.Currency, in.Action.AmountMinor = currency, amount
		in.Referent.Currency, in.Referent.RefundableMinor = currency, refundable
		return in
	}
	for _, tc := range []struct {
		name string
		in   Input
		want string
	}{
		{"dollars", refund("USD", sik.RailStripe, 250000, 189900), "2,500.00 USD exceeds the 1,899.00 USD still refundable on pay_1002."},
		{"zero-decimal yen", refund("JPY", sik.RailStripe, 2500, 1500), "2,500 JPY exceeds the 1,500 JPY still refundable on pay_1002."},
		{"three-decimal dinar", refund("KWD", sik.RailRazorpay, 5130, 5120), "5.130 KWD exceeds the 5.120 KWD still refundable on pay_1002."},
		{"Stripe's two-decimal krona", refund("ISK", sik.RailStripe, 50000, 40000), "500.00 ISK exceeds the 400.00 ISK still refundable on pay_1002."},
		{"ISO's zero-decimal krona off Stripe", refund("ISK", sik.RailRazorpay, 50000, 40000), "50,000 ISK exceeds the 40,000 ISK still refundable on pay_1002."},
		{"unknown currency keeps minor units", refund("XYZ", sik.RailStripe, 250000, 189900), "250000 minor units of XYZ exceeds the 189900 minor units of XYZ still refundable on pay_1002."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := CheckValue(tc.in); r.Reason != tc.want {
				t.Fatalf("reason %q, want %q", r.Reason, tc.want)
			}
		})
	}
	in := payoutIn()
	in.Action.AmountMinor = 60000
	in.Mandate.Grants[1].MaxAmountMinor = 50000
	if r := CheckLimits(in); r.ReasonCode != ReasonAmountAboveMaximum || !strings.HasPrefix(r.Reason, "600.00 USD is above the 500.00 USD maximum") {
		t.Fatalf("CheckLimits = %s %q", r.ReasonCode, r.Reason)
	}
}
