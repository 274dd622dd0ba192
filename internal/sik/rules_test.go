package sik

import (
	"fmt"
	"testing"
)

// Rail rules for idempotency values, written from the rails' documentation
// and independently of stamp.go, so that stamps are checked against the
// rule and not against themselves.

// checkStripeKey: Stripe Idempotency-Key, 1–255 characters. Stripe names no
// alphabet; we also require visible ASCII, which any header survives.
func checkStripeKey(v string) error {
	if len(v) < 1 || len(v) > 255 {
		return fmt.Errorf("stripe: length %d not in 1..255", len(v))
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return fmt.Errorf("stripe: byte 0x%02x at %d is not visible ASCII", v[i], i)
		}
	}
	return nil
}

// checkRazorpayRefundKey: X-Refund-Idempotency, at least 10 characters of
// letters, digits, hyphen and underscore.
func checkRazorpayRefundKey(v string) error {
	if len(v) < 10 {
		return fmt.Errorf("razorpay refund: length %d < 10", len(v))
	}
	return onlyChars("razorpay refund", v, false)
}

// checkRazorpayPayoutKey: X-Payout-Idempotency and X-Transfer-Idempotency,
// 4–36 characters of letters, digits, hyphen, underscore and space.
func checkRazorpayPayoutKey(v string) error {
	if len(v) < 4 || len(v) > 36 {
		return fmt.Errorf("razorpay payout/transfer: length %d not in 4..36", len(v))
	}
	return onlyChars("razorpay payout/transfer", v, true)
}

func onlyChars(rule, v string, space bool) error {
	for i := 0; i < len(v); i++ {
		c := v[i]
		ok := c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || (space && c == ' ')
		if !ok {
			return fmt.Errorf("%s: byte 0x%02x at %d not allowed", rule, c, i)
		}
	}
	return nil
}

// headerRules maps each idempotency header to the rule its value obeys.
var headerRules = map[string]func(string) error{
	"Idempotency-Key":        checkStripeKey,
	"X-Refund-Idempotency":   checkRazorpayRefundKey,
	"X-Payout-Idempotency":   checkRazorpayPayoutKey,
	"X-Transfer-Idempotency": checkRazorpayPayoutKey,
}

// checkAllRails applies every rail's rule, since one stamp value is used on
// whichever rail the intent targets.
func checkAllRails(v string) error {
	for _, check := range []func(string) error{checkStripeKey, checkRazorpayRefundKey, checkRazorpayPayoutKey} {
		if err := check(v); err != nil {
			return err
		}
	}
	return nil
}

// The checkers must be able to fail, or the stamp tests prove nothing.
func TestRuleCheckers(t *testing.T) {
	long := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a'
		}
		return string(b)
	}
	tests := []struct {
		name  string
		check func(string) error
		in    string
		ok    bool
	}{
		{"stripe uuid", checkStripeKey, "53cda91c-8f81-4e77-bbb9-7388f4ac6bf4", true},
		{"stripe 255", checkStripeKey, long(255), true},
		{"stripe 256", checkStripeKey, long(256), false},
		{"stripe empty", checkStripeKey, "", false},
		{"stripe newline", checkStripeKey, "abc\n", false},
		{"refund uuid", checkRazorpayRefundKey, "550e8400-e29b-41d4-a716-446655440000", true},
		{"refund 10", checkRazorpayRefundKey, long(10), true},
		{"refund 9", checkRazorpayRefundKey, long(9), false},
		{"refund space", checkRazorpayRefundKey, "abcde fghij", false},
		{"refund dot", checkRazorpayRefundKey, "abcde.fghij", false},
		{"refund long is fine", checkRazorpayRefundKey, long(300), true},
		{"payout uuid", checkRazorpayPayoutKey, "53cda91c-8f81-4e77-bbb9-7388f4ac6bf4", true},
		{"payout 4", checkRazorpayPayoutKey, "ab_-", true},
		{"payout space", checkRazorpayPayoutKey, "ab cd", true},
		{"payout 3", checkRazorpayPayoutKey, "abc", false},
		{"payout 37", checkRazorpayPayoutKey, long(37), false},
		{"payout plus", checkRazorpayPayoutKey, "abc+def", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check(tc.in); (err == nil) != tc.ok {
				t.Fatalf("check(%q) = %v, want ok=%v", tc.in, err, tc.ok)
			}
		})
	}
}
