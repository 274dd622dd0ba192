// Package stripe is the rail.Adapter for Stripe (api.stripe.com): refunds,
// payouts and transfers, form-encoded, keyed by the Idempotency-Key header
// and stamped in metadata[countersign_sik].
//
// Field choices against Stripe's real objects (API version [APIVersion]):
//
//   - A PaymentIntent carries amount_received but no refund total; refunds
//     are recorded on its charge. Resolve therefore reads the PaymentIntent
//     with its latest_charge expanded (for a succeeded PaymentIntent that is
//     the charge that took the money) and values the refundable balance as
//     latest_charge.amount_captured − latest_charge.amount_refunded. A
//     PaymentIntent that never captured has a latest_charge with
//     amount_captured 0 (or none at all), so nothing is refundable.
//   - A Charge carries amount_captured and amount_refunded directly.
//     Charge.amount is what was authorised, not what can be refunded.
//   - Resolve names a charge-based refund's subject by the charge's
//     PaymentIntent when it has one: one payment refunded "by charge" and
//     "by payment_intent" is one subject, so the SIK and the ledger's
//     refundable arithmetic cannot be dodged by switching ids.
//   - Refund objects carry no fee. Payout and Transfer objects have no fee
//     field either: the fee lives on the balance transaction, so Classify
//     reports it only when the caller expanded balance_transaction.
//   - Stripe never shows the idempotency key on the object, so Find matches
//     on metadata.countersign_sik alone, never on amount, and never uses
//     /v1/*/search (it lags by up to an hour).
package stripe

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// APIVersion is the Stripe-Version sent on the adapter's own reads (Resolve,
// Find): the object shapes this package parses (latest_charge on a
// PaymentIntent, amount_captured on a Charge) are those of this version,
// whatever the account's default version is.
const APIVersion = "2024-06-20"

// maxKeyLen is Stripe's limit on Idempotency-Key.
const maxKeyLen = 255

type adapter struct{}

// New returns the Stripe adapter. It is stateless and safe for concurrent
// use.
func New() rail.Adapter { return adapter{} }

// Rail implements rail.Adapter.
func (adapter) Rail() sik.Rail { return sik.RailStripe }

// Stamp implements rail.Adapter: the Idempotency-Key header and
// metadata[countersign_sik], both carrying the same stamp, and
// Stripe-Version pinned to APIVersion.
func (adapter) Stamp(a rail.Action, key sik.SIK, gen uint32) (rail.Stamped, error) {
	header, value, err := sik.HeaderStamp(sik.RailStripe, a.Kind, key, gen)
	if err != nil {
		return rail.Stamped{}, fmt.Errorf("stripe: stamp: %w", err)
	}
	if value == "" || len(value) > maxKeyLen {
		return rail.Stamped{}, fmt.Errorf("stripe: stamp %q breaks Stripe's 1-%d character key rule", value, maxKeyLen)
	}
	field, bodyValue, err := sik.BodyStamp(sik.RailStripe, key, gen)
	if err != nil {
		return rail.Stamped{}, fmt.Errorf("stripe: stamp: %w", err)
	}
	// Stripe-Version is pinned: the rail reads the request as the version
	// Parse read it as, whatever the account's default.
	st := rail.Stamped{Headers: map[string]string{header: value, versionHeader: APIVersion}, BodyField: field, BodyValue: bodyValue}
	if a.AmountMinor == nil {
		// A full refund leaves for the amount the gates valued: Stripe
		// refunds what `amount` says (at most what is refundable).
		st.AmountField = "amount"
	}
	return st, nil
}

// versionHeader is the header Stamp pins to APIVersion.
const versionHeader = "Stripe-Version"

// Refusal implements rail.Adapter: {"error":{"type","code","message"}}, the
// shape Stripe's SDKs read. The type is api_error for a 5xx status (as
// Stripe's own), invalid_request_error otherwise.
func (adapter) Refusal(status int, code, message string) []byte {
	typ := "invalid_request_error"
	if status >= http.StatusInternalServerError {
		typ = "api_error"
	}
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	body.Error.Type, body.Error.Code, body.Error.Message = typ, code, message
	out, err := json.Marshal(body)
	if err != nil { // unreachable: three strings
		return []byte(`{"error":{"type":"api_error","code":"countersign_internal","message":"refused"}}`)
	}
	return out
}
