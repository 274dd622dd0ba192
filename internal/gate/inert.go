package gate

import "strings"

// inert renders agent-chosen text (a label member's name, a payee, a
// subject, a currency, a host, an API version, an MCP tool name) for a
// reason. A reason is shown to the owner and leaves in the signed
// intent.held webhook, whose receiver may paste it into a dashboard, Slack
// or a model's prompt; the agent must not be able to write markup or
// instructions there. So every byte outside [A-Za-z0-9_.\-\[\]] is
// percent-encoded as %XX (RFC 3986 style, '%' itself included), which
// keeps each value recognisable (metadata[order_id] reads unchanged) and
// unambiguous while no <, >, |, quote, backtick, space or control
// character survives.
func inert(s string) string {
	i := 0
	for i < len(s) && inertByte(s[i]) {
		i++
	}
	if i == len(s) {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		c := s[i]
		if inertByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0x0f])
	}
	return b.String()
}

func inertByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '_' || c == '.' || c == '-' || c == '[' || c == ']'
}

// inertAll renders each of names with inert.
func inertAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = inert(n)
	}
	return out
}
