package mcp

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// An MCP tool reports a failed rail call as text (isError, or a JSON-RPC
// error message). What the text says depends on the server: Stripe's
// toolkit says only "Failed to create refund"; Razorpay's server says
// "creating refund failed: <description>" without the error code. So the
// text is Rejected only when it carries the rail's own error vocabulary
// for a definite refusal, and Ambiguous otherwise: a guess of "rejected"
// would let a retry pay twice.

// markers are the rail's words, matched case-sensitively as the rail
// writes them.
type markers struct {
	inProgress  []string // the same idempotency key is still running
	fingerprint []string // the key was used with other parameters
	ambiguous   []string // the rail or the network failed: the work may have run
	rejected    []string // a definite refusal: nothing was applied
}

var railMarkers = map[sik.Rail]markers{
	sik.RailStripe: {
		inProgress:  []string{"idempotency_key_in_use"},
		fingerprint: []string{"idempotency_error", "Keys for idempotent requests can only be used with the same parameters"},
		ambiguous:   []string{"api_error", "api_connection_error", "StripeAPIError", "StripeConnectionError"},
		rejected: []string{"invalid_request_error", "card_error", "StripeInvalidRequestError", "StripeCardError",
			"StripeRateLimitError", "StripeAuthenticationError", "StripePermissionError"},
	},
	sik.RailRazorpay: {
		ambiguous: []string{"GATEWAY_ERROR", "SERVER_ERROR"},
		rejected:  []string{"BAD_REQUEST_ERROR"},
	},
}

// transportWords say the failure was on the way, whatever else the text
// says; matched without regard to case.
var transportWords = []string{"timeout", "timed out", "deadline exceeded", "connection reset", "econnreset", "etimedout", "socket hang up", "connection refused"}

// classifyText classifies an error text from the tool or the server.
func classifyText(r sik.Rail, what, text string) rail.Classification {
	reason := fmt.Sprintf("%s: %s", what, snippet([]byte(text)))
	if strings.TrimSpace(text) == "" {
		return ambiguous("%s without saying what happened", what)
	}
	if o, said := textSays(r, text); said {
		return rail.Classification{Outcome: o, Reason: reason}
	}
	return rail.Classification{Outcome: rail.Ambiguous, Reason: reason + " (not a refusal Countersign can prove)"}
}

// textSays is what the rail's vocabulary in text says, and false when
// text carries none of it.
func textSays(r sik.Rail, text string) (rail.Outcome, bool) {
	m := railMarkers[r]
	lower := strings.ToLower(text)
	switch {
	case containsAny(text, m.inProgress) || r == sik.RailRazorpay && strings.Contains(lower, "idempotency") &&
		containsAny(lower, []string{"in progress", "being processed"}):
		return rail.InProgress, true
	case containsAny(text, m.fingerprint) || strings.Contains(lower, "idempotency") &&
		containsAny(lower, []string{"different request", "different payload", "mismatch", "does not match", "doesn't match"}):
		return rail.FingerprintMismatch, true
	case containsAny(text, m.ambiguous) || containsAny(lower, transportWords):
		return rail.Ambiguous, true
	case containsAny(text, m.rejected):
		return rail.Rejected, true
	}
	return rail.Ambiguous, false
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// JSON-RPC codes a server answers before dispatching to any tool, and
// the two the TypeScript SDK's HTTP transport uses for its own refusals
// (preDispatch).
const (
	codeParse           = -32700
	codeInvalidRequest  = -32600
	codeMethodNotFound  = -32601
	codeInvalidParams   = -32602
	codeServerError     = -32000
	codeSessionNotFound = -32001
)

// inputSide says whether an invalid-params text speaks of the call's
// input (bad arguments, an unknown tool) and not of the tool's output.
func inputSide(text string) bool {
	lower := strings.ToLower(text)
	return containsAny(lower, []string{"invalid arguments", "not found", "unknown tool"}) &&
		!containsAny(lower, []string{"output", "structured content", "result"})
}

// classifyError reads a JSON-RPC error answering the tools/call.
func classifyError(r sik.Rail, raw json.RawMessage) rail.Classification {
	var e struct {
		Code    *int64          `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Code == nil {
		return ambiguous("the MCP server answered an unreadable JSON-RPC error: %s", snippet(raw))
	}
	text := e.Message
	if s, ok := asString(e.Data); ok {
		text += ": " + s
	} else if len(e.Data) > 0 && string(e.Data) != "null" {
		text += ": " + string(e.Data)
	}
	what := fmt.Sprintf("the MCP server answered JSON-RPC error %d", *e.Code)
	switch *e.Code {
	case codeParse, codeInvalidRequest, codeMethodNotFound:
		return rail.Classification{Outcome: rail.Rejected, Reason: fmt.Sprintf("%s before running any tool: %s", what, snippet([]byte(text)))}
	case codeInvalidParams:
		// Invalid params is also how the TypeScript SDK reports a tool's
		// output failing its schema, after the tool ran: only input-side
		// wording proves the tool never ran.
		if inputSide(text) {
			return rail.Classification{Outcome: rail.Rejected, Reason: fmt.Sprintf("%s before running the tool: %s", what, snippet([]byte(text)))}
		}
	}
	return classifyText(r, what, text)
}
