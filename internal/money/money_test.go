package money

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conv     Convention
		minor    int64
		currency string
		want     string
	}{
		{"two decimals", ISO4217, 60000, "USD", "600.00 USD"},
		{"thousands", ISO4217, 189900, "USD", "1,899.00 USD"},
		{"millions", ISO4217, 123456789, "EUR", "1,234,567.89 EUR"},
		{"one cent", ISO4217, 1, "USD", "0.01 USD"},
		{"ten cents", ISO4217, 10, "GBP", "0.10 GBP"},
		{"zero", ISO4217, 0, "INR", "0.00 INR"},
		{"negative", ISO4217, -5, "EUR", "-0.05 EUR"},
		{"negative thousands", ISO4217, -123456, "USD", "-1,234.56 USD"},
		{"zero-decimal yen", ISO4217, 1500, "JPY", "1,500 JPY"},
		{"zero-decimal won", ISO4217, 50000, "KRW", "50,000 KRW"},
		{"zero-decimal dong", ISO4217, 1234567, "VND", "1,234,567 VND"},
		{"zero-decimal small", ISO4217, 7, "JPY", "7 JPY"},
		{"zero-decimal zero", ISO4217, 0, "JPY", "0 JPY"},
		{"three decimals dinar", ISO4217, 5120, "KWD", "5.120 KWD"},
		{"three decimals thousands", ISO4217, 1234567, "BHD", "1,234.567 BHD"},
		{"three decimals small", ISO4217, 5, "OMR", "0.005 OMR"},
		{"three decimals jordan", ISO4217, 1000, "JOD", "1.000 JOD"},
		{"three decimals tunisia", ISO4217, 999, "TND", "0.999 TND"},
		{"four decimals", ISO4217, 12345, "CLF", "1.2345 CLF"},
		{"rupee", ISO4217, 250000, "INR", "2,500.00 INR"},
		{"ISO krona has no decimals", ISO4217, 500, "ISK", "500 ISK"},
		{"Stripe krona keeps two decimals", Stripe, 500, "ISK", "5.00 ISK"},
		{"ISO ariary has two decimals", ISO4217, 500, "MGA", "5.00 MGA"},
		{"Stripe ariary is zero-decimal", Stripe, 500, "MGA", "500 MGA"},
		{"Stripe follows ISO elsewhere", Stripe, 60000, "USD", "600.00 USD"},
		{"Stripe three decimals", Stripe, 5120, "KWD", "5.120 KWD"},
		{"Stripe zero-decimal", Stripe, 1500, "JPY", "1,500 JPY"},
		{"unknown currency", ISO4217, 12345, "XYZ", "12345 minor units of XYZ"},
		{"no minor unit (gold)", ISO4217, 12345, "XAU", "12345 minor units of XAU"},
		{"lower-case is not a code", ISO4217, 12345, "usd", "12345 minor units of usd"},
		{"no currency", ISO4217, 12345, "", "12345 minor units (no currency)"},
		{"negative unknown", ISO4217, -3, "XYZ", "-3 minor units of XYZ"},
		{"max int64", ISO4217, math.MaxInt64, "USD", "92,233,720,368,547,758.07 USD"},
		{"min int64", ISO4217, math.MinInt64, "USD", "-92,233,720,368,547,758.08 USD"},
		{"min int64 zero-decimal", ISO4217, math.MinInt64, "JPY", "-9,223,372,036,854,775,808 JPY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.conv.Format(tc.minor, tc.currency); got != tc.want {
				t.Fatalf("Format(%d, %q) = %q, want %q", tc.minor, tc.currency, got, tc.want)
			}
		})
	}
}

func TestForRail(t *testing.T) {
	for rail, want := range map[string]Convention{"stripe": Stripe, "razorpay": ISO4217, "mcp": ISO4217, "": ISO4217} {
		if got := ForRail(rail); got != want {
			t.Errorf("ForRail(%q) = %v, want %v", rail, got, want)
		}
	}
}

// The currencies Stripe's documentation names as zero- and three-decimal
// are read that way (https://docs.stripe.com/currencies).
func TestStripeDocumentedExponents(t *testing.T) {
	for _, c := range strings.Fields("BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF UGX VND VUV XAF XOF XPF") {
		if e, ok := Stripe.Exponent(c); !ok || e != 0 {
			t.Errorf("Stripe.Exponent(%s) = %d, %v; Stripe documents it as zero-decimal", c, e, ok)
		}
	}
	for _, c := range strings.Fields("BHD JOD KWD OMR TND") {
		if e, ok := Stripe.Exponent(c); !ok || e != 3 {
			t.Errorf("Stripe.Exponent(%s) = %d, %v; Stripe documents it as three-decimal", c, e, ok)
		}
	}
	for _, c := range strings.Fields("ISK HUF TWD USD EUR INR") {
		if e, ok := Stripe.Exponent(c); !ok || e != 2 {
			t.Errorf("Stripe.Exponent(%s) = %d, %v; Stripe's API reads it with two decimals", c, e, ok)
		}
	}
}

// Every code in the table is three upper-case letters and has an exponent
// ISO 4217 uses; no code without a minor unit slipped in.
func TestISOTableShape(t *testing.T) {
	for c, e := range iso4217 {
		if len(c) != 3 || strings.ToUpper(c) != c || e < 0 || e > 4 {
			t.Errorf("iso4217[%q] = %d", c, e)
		}
	}
	for _, c := range strings.Fields("XAU XAG XPD XPT XDR XSU XUA XBA XBB XBC XBD XTS XXX") {
		if _, ok := iso4217[c]; ok {
			t.Errorf("%s has no minor unit in ISO 4217 but is in the table", c)
		}
	}
}

// parseMajor inverts Format for a known currency: it removes the code, the
// commas and the decimal point and returns the integer and the number of
// fraction digits.
func parseMajor(t *rapid.T, s, currency string) (*big.Int, int) {
	num, ok := strings.CutSuffix(s, " "+currency)
	if !ok {
		t.Fatalf("%q does not end in %q", s, " "+currency)
	}
	whole, frac, _ := strings.Cut(num, ".")
	groups := strings.Split(strings.TrimPrefix(whole, "-"), ",")
	for i, g := range groups {
		if (i == 0 && (len(g) < 1 || len(g) > 3)) || (i > 0 && len(g) != 3) {
			t.Fatalf("%q: thousands group %q misplaced", s, g)
		}
	}
	digits := strings.ReplaceAll(whole, ",", "") + frac
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		t.Fatalf("%q: not a number", s)
	}
	return n, len(frac)
}

// Format is exact: for every amount and known currency, reading the
// written number back (commas and point removed) gives the amount, with
// exactly the currency's digits after the point and a well-placed comma
// every three digits.
func TestFormatIsExact(t *testing.T) {
	codes := make([]string, 0, len(iso4217))
	for c := range iso4217 {
		codes = append(codes, c)
	}
	amount := rapid.OneOf(rapid.Int64Range(-1000, 1000), rapid.Int64(), rapid.Int64Range(math.MaxInt64-10, math.MaxInt64), rapid.Int64Range(math.MinInt64, math.MinInt64+10))
	rapid.Check(t, func(t *rapid.T) {
		conv := rapid.SampledFrom([]Convention{ISO4217, Stripe}).Draw(t, "convention")
		c := rapid.SampledFrom(codes).Draw(t, "currency")
		minor := amount.Draw(t, "minor")
		s := conv.Format(minor, c)
		exp, _ := conv.Exponent(c)
		n, fracDigits := parseMajor(t, s, c)
		if n.Cmp(big.NewInt(minor)) != 0 {
			t.Fatalf("Format(%d, %s) = %q reads back as %s", minor, c, s, n)
		}
		if fracDigits != exp {
			t.Fatalf("Format(%d, %s) = %q has %d fraction digits, want %d", minor, c, s, fracDigits, exp)
		}
	})
}

// An unknown currency is never given a decimal point: the amount is
// written as the plain integer it is.
func TestFormatUnknownIsPlain(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := rapid.StringMatching(`[A-Z]{3}`).Filter(func(c string) bool { _, ok := iso4217[c]; return !ok }).Draw(t, "currency")
		minor := rapid.Int64().Draw(t, "minor")
		if got, want := Format(minor, c), strconv.FormatInt(minor, 10)+" minor units of "+c; got != want {
			t.Fatalf("Format(%d, %s) = %q, want %q", minor, c, got, want)
		}
	})
}

// FuzzFormat: any amount and any currency string gives a sentence-safe
// answer that names the amount exactly.
func FuzzFormat(f *testing.F) {
	f.Add(int64(60000), "USD")
	f.Add(int64(1500), "JPY")
	f.Add(int64(5120), "KWD")
	f.Add(int64(math.MinInt64), "XYZ")
	f.Add(int64(-1), "")
	f.Fuzz(func(t *testing.T, minor int64, currency string) {
		s := Format(minor, currency)
		if !strings.HasSuffix(s, " "+currency) && !strings.HasSuffix(s, " of "+currency) && currency != "" {
			t.Fatalf("Format(%d, %q) = %q does not name the currency", minor, currency, s)
		}
		num, _, _ := strings.Cut(s, " ")
		if _, known := iso4217[currency]; !known {
			if num != strconv.FormatInt(minor, 10) {
				t.Fatalf("Format(%d, %q) = %q: an unknown currency must keep the plain integer", minor, currency, s)
			}
			return
		}
		n, ok := new(big.Int).SetString(strings.NewReplacer(",", "", ".", "").Replace(num), 10)
		if !ok || n.Cmp(big.NewInt(minor)) != 0 {
			t.Fatalf("Format(%d, %q) = %q does not read back as %d", minor, currency, s, minor)
		}
	})
}
