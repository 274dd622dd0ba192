// Package money writes amounts for people. APIs, the ledger and the rails
// carry integer minor units ("60000", "USD"); a sentence or a table a
// person reads carries major units with the code ("600.00 USD",
// "1,500 JPY", "5.120 KWD").
//
// The number of minor-unit digits is the ISO 4217 exponent, with the rail's
// own reading where it differs (Stripe: ISK keeps two decimals in its API,
// MGA has none). A currency whose exponent is not known, or that has no
// minor unit (XAU, XDR, …), is never given a guessed decimal point: it is
// written as "12345 minor units of XYZ".
//
// golang.org/x/text/currency was considered and not used: its rounding data
// is CLDR's display precision, not the ISO 4217 minor unit the rails count
// in (it gives IQD, IDR, COP and ISK no decimals and XAU two), and it
// predates VES, MRU, SLE, ZWG and XCG.
package money

import (
	"strconv"
	"strings"
)

// Convention is a reading of "minor units" for a currency: ISO 4217's, or a
// rail's where the rail's API departs from it.
type Convention int

const (
	// ISO4217 reads minor units by the ISO 4217 exponent.
	ISO4217 Convention = iota
	// Stripe reads minor units as Stripe's API does: ISO 4217 except ISK
	// (two decimals: 100 is 1 króna) and MGA (zero-decimal).
	Stripe
)

// ForRail returns the convention of a rail by its name ("stripe",
// "razorpay", "mcp"); rails without their own reading use ISO 4217.
func ForRail(rail string) Convention {
	if rail == "stripe" {
		return Stripe
	}
	return ISO4217
}

// stripeExponents are Stripe's departures from ISO 4217
// (https://docs.stripe.com/currencies#zero-decimal, #special-cases).
var stripeExponents = map[string]int{
	"ISK": 2, // ISO 0; Stripe keeps two decimals and requires multiples of 100
	"MGA": 0, // ISO 2; zero-decimal at Stripe
}

// Exponent is the number of minor-unit digits of currency under c; ok is
// false when the currency is not known or has no minor unit.
func (c Convention) Exponent(currency string) (exp int, ok bool) {
	if c == Stripe {
		if e, ok := stripeExponents[currency]; ok {
			return e, true
		}
	}
	e, ok := iso4217[currency]
	return e, ok
}

// Exponent is the ISO 4217 exponent of currency.
func Exponent(currency string) (int, bool) { return ISO4217.Exponent(currency) }

// Format writes minor units of currency in major units with the code, by
// ISO 4217: Format(189900, "USD") is "1,899.00 USD".
func Format(minor int64, currency string) string { return ISO4217.Format(minor, currency) }

// Format writes minor units of currency in major units with the code, with
// a comma between thousands and exactly the currency's minor-unit digits:
// "600.00 USD", "1,500 JPY", "-0.05 EUR", "5.120 KWD". A currency whose
// exponent is unknown is written "12345 minor units of XYZ", and an empty
// currency "12345 minor units (no currency)".
func (c Convention) Format(minor int64, currency string) string {
	exp, ok := c.Exponent(currency)
	if !ok {
		if currency == "" {
			return strconv.FormatInt(minor, 10) + " minor units (no currency)"
		}
		return strconv.FormatInt(minor, 10) + " minor units of " + currency
	}
	return Major(minor, exp) + " " + currency
}

// Major writes minor as a decimal number of major units with exp fraction
// digits and commas between thousands: Major(189900, 2) is "1,899.00".
// It is exact for every int64 (no floating point).
func Major(minor int64, exp int) string {
	neg := minor < 0
	u := uint64(minor)
	if neg {
		u = -u // two's complement: exact for math.MinInt64 too
	}
	digits := strconv.FormatUint(u, 10)
	if len(digits) <= exp {
		digits = strings.Repeat("0", exp-len(digits)+1) + digits
	}
	whole, frac := digits[:len(digits)-exp], digits[len(digits)-exp:]
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, d := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if exp > 0 {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	return b.String()
}

// Exponents returns copies of the tables this package formats with: ISO
// 4217's exponent of every currency that has a minor unit, and the
// departures of each rail convention from it (keyed by rail name), so that
// a page formatting amounts in a browser reads minor units exactly as the
// refusals the agent gets do.
func Exponents() (iso map[string]int, departures map[string]map[string]int) {
	iso = make(map[string]int, len(iso4217))
	for k, v := range iso4217 {
		iso[k] = v
	}
	stripe := make(map[string]int, len(stripeExponents))
	for k, v := range stripeExponents {
		stripe[k] = v
	}
	return iso, map[string]map[string]int{"stripe": stripe}
}
