// Package razorpay is the rail.Adapter for Razorpay (api.razorpay.com):
// refunds of payments and RazorpayX payouts, JSON bodies, keyed by the
// X-Refund-Idempotency / X-Payout-Idempotency headers and stamped in
// notes.countersign_sik.
//
// Field choices against Razorpay's real entities:
//
//   - A payment carries amount, amount_refunded, currency and status.
//     Only a captured payment can be refunded, and a partially refunded one
//     stays captured, so the refundable balance is amount − amount_refunded
//     when status is "captured", and 0 otherwise (authorized, failed, or
//     "refunded" once fully refunded).
//   - A payout carries fees (Razorpay's fee including GST) and tax (the
//     GST part): Classify reports fees, the total the account paid. A
//     refund carries no fee.
//   - Razorpay writes empty notes as [] rather than {}: both read as "no
//     stamp".
//   - Neither entity shows the idempotency key, so Find matches on
//     notes.countersign_sik alone, never on amount.
package razorpay

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

type adapter struct{}

// New returns the Razorpay adapter. It is stateless and safe for
// concurrent use.
func New() rail.Adapter { return adapter{} }

// Rail implements rail.Adapter.
func (adapter) Rail() sik.Rail { return sik.RailRazorpay }

// Stamp implements rail.Adapter. Refunds take X-Refund-Idempotency (at
// least 10 of [A-Za-z0-9_-]), payouts X-Payout-Idempotency (4–36 of
// [A-Za-z0-9_ -]); a stamp is 32–36 characters of base32, '-' and base36,
// which fits both, and is checked rather than assumed.
func (adapter) Stamp(a rail.Action, key sik.SIK, gen uint32) (rail.Stamped, error) {
	header, value, err := sik.HeaderStamp(sik.RailRazorpay, a.Kind, key, gen)
	if err != nil {
		return rail.Stamped{}, fmt.Errorf("razorpay: stamp: %w", err)
	}
	if err := checkKey(a.Kind, value); err != nil {
		return rail.Stamped{}, fmt.Errorf("razorpay: stamp: %w", err)
	}
	field, bodyValue, err := sik.BodyStamp(sik.RailRazorpay, key, gen)
	if err != nil {
		return rail.Stamped{}, fmt.Errorf("razorpay: stamp: %w", err)
	}
	st := rail.Stamped{Headers: map[string]string{header: value}, BodyField: field, BodyValue: bodyValue}
	if a.AmountMinor == nil {
		// A full refund leaves for the amount the gates valued: Razorpay
		// refunds what `amount` says (at most what is refundable).
		st.AmountField = "amount"
	}
	return st, nil
}

// checkKey applies Razorpay's idempotency key rules for kind.
func checkKey(kind sik.Kind, v string) error {
	minLen, maxLen := 10, 0 // refunds: at least 10, no documented maximum
	if kind != sik.KindRefund {
		minLen, maxLen = 4, 36
	}
	if len(v) < minLen || maxLen > 0 && len(v) > maxLen {
		return fmt.Errorf("key %q has %d characters, want %d to %d", v, len(v), minLen, maxLen)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !rail.IDByte(c) && c != '-' {
			return fmt.Errorf("key %q has %q outside [A-Za-z0-9_-]", v, c)
		}
	}
	return nil
}

// Refusal implements rail.Adapter:
// {"error":{"code":"BAD_REQUEST_ERROR","description":…,"reason":…}}, with
// SERVER_ERROR for a 5xx status as Razorpay's own.
func (adapter) Refusal(status int, code, message string) []byte {
	errCode := "BAD_REQUEST_ERROR"
	if status >= http.StatusInternalServerError {
		errCode = "SERVER_ERROR"
	}
	var body struct {
		Error struct {
			Code        string `json:"code"`
			Description string `json:"description"`
			Reason      string `json:"reason"`
		} `json:"error"`
	}
	body.Error.Code, body.Error.Description, body.Error.Reason = errCode, message, code
	out, err := json.Marshal(body)
	if err != nil { // unreachable: three strings
		return []byte(`{"error":{"code":"SERVER_ERROR","description":"refused","reason":"countersign_internal"}}`)
	}
	return out
}
