package cli

import (
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

func TestMinorExample(t *testing.T) {
	stripe, razorpay := countersignv1.Rail_RAIL_STRIPE, countersignv1.Rail_RAIL_RAZORPAY
	for _, tc := range []struct {
		rail     countersignv1.Rail
		minor    int64
		currency string
		want     string
	}{
		{stripe, 5000, "USD", "5000 = 50.00 USD"},
		{stripe, 5000, "JPY", "5000 = 5,000 JPY"},
		{stripe, 5000, "KWD", "5000 = 5.000 KWD"},
		{stripe, 5000, "XYZ", "5000 minor units of XYZ"},
		// Stripe's departures from ISO 4217: what Stripe moves for 5000.
		{stripe, 5000, "MGA", "5000 = 5,000 MGA"},
		{stripe, 5000, "ISK", "5000 = 50.00 ISK"},
		// Other rails read ISO 4217.
		{razorpay, 5000, "MGA", "5000 = 50.00 MGA"},
		{razorpay, 5000, "ISK", "5000 = 5,000 ISK"},
	} {
		if got := minorExample(tc.rail, tc.minor, tc.currency); got != tc.want {
			t.Errorf("minorExample(%s, %d, %s) = %q, want %q", tc.rail, tc.minor, tc.currency, got, tc.want)
		}
	}
}

func TestMandateLimits(t *testing.T) {
	m := &countersignv1.Mandate{
		Rail: countersignv1.Rail_RAIL_STRIPE,
		Grants: []*countersignv1.Grant{
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 189900, Currencies: []string{"USD", "JPY"}},
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, MaxAmountMinor: 50000, Currencies: []string{"ISK"}},
		},
		Budgets: []*countersignv1.Money{{AmountMinor: 1000000, Currency: "USD"}},
		Windows: []*countersignv1.Window{{Duration: durationpb.New(36 * 60 * 60 * 1e9), MaxAmount: &countersignv1.Money{AmountMinor: 150000, Currency: "USD"}}},
	}
	want := "refund ≤ 1,899.00 USD or 189,900 JPY; payout ≤ 500.00 ISK; budget 10,000.00 USD; 1,500.00 USD per 36h"
	if got := mandateLimits(m); got != want {
		t.Fatalf("mandateLimits = %q, want %q", got, want)
	}
	if got := mandateLimits(&countersignv1.Mandate{}); got != "-" {
		t.Fatalf("mandateLimits of an empty mandate = %q", got)
	}
}
