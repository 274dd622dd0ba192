package engine

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// ReasonReadNeedsExtProc is the reason code of a read refused because no
// ext_proc will see its answer.
const ReasonReadNeedsExtProc = "read_needs_ext_proc"

// secretsUnscrubbed refuses a read whose answer may carry what the agent
// may not see and that no ext_proc will see: a PaymentIntent's
// client_secret (with the account's publishable key it confirms the
// PaymentIntent without Countersign), a card's or its holder's details
// (secrets.CardMembers); only ext_proc removes them (secrets.ScrubJSON).
// A native caller's read, or one through a proxy without ext_proc
// (Istio's CUSTOM provider), is refused when it is
//   - a Stripe REST read of a PaymentIntent (its client_secret, and after
//     a failed payment the PaymentMethod in last_payment_error) or of a
//     charge (billing_details, payment_method_details: found by a
//     review); any other path carries neither (the query allowlist
//     refuses every expand);
//   - a Razorpay REST read of a payment (its payer's UPI address);
//   - a read-only tools/call on a payment MCP server: a tool's answer is
//     the rail's objects as the server chooses to render them
//     (list_payment_intents, which an owner may list read-only, renders
//     whole PaymentIntents; Razorpay's fetch_payment a payment with its
//     payer's UPI address), so none is sent unchecked (found by reviews).
func secretsUnscrubbed(req Request, o Options, acct *rails.Account) *Outcome {
	if answersChecked(req, o) {
		return nil
	}
	if _, isMCP := acct.Adapter.(rail.ToolDescriber); isMCP {
		if req.Method != http.MethodPost || !isToolCall(req.Body) {
			return nil
		}
		out := refuseRail(acct, req, ReasonReadNeedsExtProc, "A payment MCP server's tool answers with the rail's objects, which may carry what only Countersign's ext_proc removes (a PaymentIntent's client_secret, a card's details, a payer's UPI address); no ext_proc will see this answer, so the call is not sent.", http.StatusForbidden)
		return &out
	}
	if req.Method != http.MethodGet {
		return nil
	}
	what := ""
	segs := strings.Split(strings.TrimPrefix(pathOnly(req.Path), "/"), "/")
	switch {
	case len(segs) != 3 || segs[0] != "v1":
	case acct.Rail == sik.RailStripe && segs[1] == "payment_intents":
		what = "A Stripe PaymentIntent's answer carries its client_secret (and after a failed payment the card's details)"
	case acct.Rail == sik.RailStripe && segs[1] == "charges":
		what = "A Stripe charge's answer carries the card's and its holder's details"
	case acct.Rail == sik.RailRazorpay && segs[1] == "payments":
		what = "A Razorpay payment's answer carries its payer's UPI address"
	}
	if what == "" {
		return nil
	}
	out := refuseRail(acct, req, ReasonReadNeedsExtProc, what+", which only Countersign's ext_proc removes, and no ext_proc will see this answer, so the read is not sent.", http.StatusForbidden)
	return &out
}

// isToolCall reports whether body, a JSON-RPC message the MCP adapter
// parsed (one object, no key twice in any case), is a tools/call; a body
// that does not decode is taken for one (refused rather than guessed).
func isToolCall(body []byte) bool {
	var m struct {
		Method *string `json:"method"`
	}
	if json.Unmarshal(body, &m) != nil {
		return true
	}
	return m.Method != nil && *m.Method == "tools/call"
}
