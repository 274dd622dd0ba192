package engine

import (
	"net/http"
	"strings"

	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// ReasonReadNeedsExtProc is the reason code of a Stripe PaymentIntent read
// refused because no ext_proc will see its answer.
const ReasonReadNeedsExtProc = "read_needs_ext_proc"

// secretsUnscrubbed refuses a read of a Stripe PaymentIntent whose answer
// no ext_proc will see: the answer carries the PaymentIntent's
// client_secret, which (with the account's publishable key) confirms it
// without Countersign, and only ext_proc removes it (extproc.ScrubSecrets).
// A native caller's read, or one through a proxy without ext_proc (Istio's
// CUSTOM provider), of any other path carries none (the query allowlist
// refuses every expand).
func secretsUnscrubbed(req Request, o Options, acct *rails.Account) *Outcome {
	if acct.Rail != sik.RailStripe || req.Method != http.MethodGet ||
		!strings.HasPrefix(pathOnly(req.Path), "/v1/payment_intents/") || answersChecked(req, o) {
		return nil
	}
	out := refuseRail(acct, req, ReasonReadNeedsExtProc, "A Stripe PaymentIntent's answer carries its client_secret, which only Countersign's ext_proc removes, and no ext_proc will see this answer, so the read is not sent.", http.StatusForbidden)
	return &out
}
