package gate

import inertpkg "github.com/countersign/countersign/internal/inert"

// inert renders agent-chosen text (a label member's name, a payee, a
// subject, a currency, a host, an API version, an MCP tool name) for a
// reason. A reason is shown to the owner and leaves in the signed
// intent.held webhook, whose receiver may paste it into a dashboard, Slack
// or a model's prompt; the agent must not be able to write markup or
// instructions there. So every byte outside [A-Za-z0-9_.\-\[\]] is
// percent-encoded as %XX (RFC 3986 style, '%' itself included), which
// keeps each value recognisable (metadata[order_id] reads unchanged) and
// unambiguous while no <, >, |, quote, backtick, space or control
// character survives. The rendering is internal/inert's Token, shared with
// the rails, whose error text reaches reasons too.
func inert(s string) string { return inertpkg.Token(s) }

func inertByte(c byte) bool { return inertpkg.TokenByte(c) }

// inertAll renders each of names with inert.
func inertAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = inert(n)
	}
	return out
}
