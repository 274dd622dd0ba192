// Package inert renders text that Countersign did not write (an agent's
// value, a rail's or an MCP server's error message) for a reason. Reasons
// are shown to the owner and leave in signed webhooks (intent.held,
// intent.failed, intent.quarantined), whose receivers may paste them into
// a dashboard, Slack or a model's prompt: the author of the text must not
// be able to write markup, links or line breaks there.
//
// Both renderings percent-encode (RFC 3986 style, '%' itself included) and
// so stay reversible: the owner can still read what was sent.
package inert

import "strings"

// Token renders a name-like value (a member name, a payee, a currency, a
// host, a tool name): every byte outside [A-Za-z0-9_.\-\[\]] is encoded,
// so metadata[order_id] reads unchanged while no <, >, |, quote, backtick,
// space or control character survives.
func Token(s string) string { return render(s, TokenByte) }

// TokenByte says whether Token keeps c as it is.
func TokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '_' || c == '.' || c == '-' || c == '[' || c == ']'
}

// Text renders free text (a rail's or an MCP server's error message, which
// may echo the agent's arguments). It keeps the space and the punctuation
// ordinary sentences use that no common renderer reads as markup,
// [A-Za-z0-9 _.,:;()'/-], and encodes every other byte: < > | (HTML, and
// Slack's <url|label> links), " ` \ * ~ [ ] ! # & $ =, '%', every control
// character (line breaks included) and every non-ASCII byte (no
// bidirectional overrides or look-alikes). A bare URL survives as plain
// text, showing the address it goes to; a link disguised under other words
// does not.
func Text(s string) string { return render(s, TextByte) }

// TextByte says whether Text keeps c as it is.
func TextByte(c byte) bool {
	if TokenByte(c) && c != '[' && c != ']' {
		return true
	}
	switch c {
	case ' ', ',', ':', ';', '(', ')', '\'', '/':
		return true
	}
	return false
}

func render(s string, keep func(byte) bool) string {
	i := 0
	for i < len(s) && keep(s[i]) {
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
		if keep(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0x0f])
	}
	return b.String()
}
