package engine

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// ReasonReadNeedsExtProc is the reason code of a Stripe read refused
// because no ext_proc will see its answer.
const ReasonReadNeedsExtProc = "read_needs_ext_proc"

// secretsUnscrubbed refuses a Stripe read whose answer may carry a
// PaymentIntent's client_secret and that no ext_proc will see: that
// secret (with the account's publishable key) confirms the PaymentIntent
// without Countersign, and only ext_proc removes it (secrets.ScrubJSON, applied by ext_proc).
// A native caller's read, or one through a proxy without ext_proc (Istio's
// CUSTOM provider), is refused when it is
//   - a REST read of a PaymentIntent (any other path carries none: the
//     query allowlist refuses every expand);
//   - a read-only tools/call on an MCP server that fronts Stripe (an
//     account of rail stripe with an MCP mapping): a tool's answer is the
//     rail's objects as the server chooses to render them
//     (list_payment_intents, which an owner may list read-only, renders
//     whole PaymentIntents), so none is sent unchecked (found by a review).
func secretsUnscrubbed(req Request, o Options, acct *rails.Account) *Outcome {
	if acct.Rail != sik.RailStripe || answersChecked(req, o) {
		return nil
	}
	if _, isMCP := acct.Adapter.(rail.ToolDescriber); isMCP {
		if req.Method != http.MethodPost || !isToolCall(req.Body) {
			return nil
		}
		out := refuseRail(acct, req, ReasonReadNeedsExtProc, "This MCP server fronts Stripe, and a tool's answer may carry a PaymentIntent's client_secret, which only Countersign's ext_proc removes; no ext_proc will see this answer, so the call is not sent.", http.StatusForbidden)
		return &out
	}
	if req.Method != http.MethodGet || !strings.HasPrefix(pathOnly(req.Path), "/v1/payment_intents/") {
		return nil
	}
	out := refuseRail(acct, req, ReasonReadNeedsExtProc, "A Stripe PaymentIntent's answer carries its client_secret, which only Countersign's ext_proc removes, and no ext_proc will see this answer, so the read is not sent.", http.StatusForbidden)
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
