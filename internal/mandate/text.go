package mandate

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// The owner approves a mandate by reading it, often as YAML someone else
// (the agent) drafted. A string that reads as something other than what it
// stores (a payee "ba_" U+202E "2001" that displays as ba_1002, a trailing
// space or zero-width space, a NUL in the purpose) deceives that reading,
// so ids are held to printable ASCII and text to characters a reader sees.
// These are the proto's rules (mandate.rail_account, mandate.payee_id,
// mandate.text, mandate.rail_host, mandate.api_version) again, naming the
// character and where it is.

// railAccountByte is a byte of a rail account id: the characters of a
// configured rail account (internal/rails).
func railAccountByte(r rune) bool {
	return r < utf8.RuneSelf && (isAlnum(byte(r)) || strings.ContainsRune("_.:-", r))
}

// payeeByte is a byte of a payee id. The rails' payees are their ids
// ([A-Za-z0-9_]: Stripe ba_…, card_…, acct_…; Razorpay fa_…); . : @ + -
// leave room for other rails' ids (an account email, a UPI address) while
// keeping out every space, invisible and look-alike character.
func payeeByte(r rune) bool {
	return r < utf8.RuneSelf && (isAlnum(byte(r)) || strings.ContainsRune("_.:@+-", r))
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// visibleText is a character of free text: anything but a control
// character (NUL, tab, newline…), an invisible format character (bidi
// overrides and isolates, zero-width spaces and joiners, the BOM…) and
// the Unicode line and paragraph separators.
func visibleText(r rune) bool {
	return !unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// hostByte is a byte of a host pin: printable ASCII without spaces.
func hostByte(r rune) bool { return r > ' ' && r <= '~' }

// headerByte is a byte of an API version pin: printable ASCII.
func headerByte(r rune) bool { return r >= ' ' && r <= '~' }

func (c *checker) text(m *countersignv1.Mandate) {
	if s := m.GetRailAccount(); s != "" {
		c.chars("rail_account", "mandate.rail_account", s, railAccountByte,
			"is not a rail account id", "rail account ids are 1–255 of A-Z, a-z, 0-9, _ . : -")
	}
	for i, s := range m.GetAllowedPayees() {
		c.chars(fmt.Sprintf("allowed_payees[%d]", i), "mandate.payee_id", s, payeeByte,
			"is not a payee id", "payee ids are the rail's ids (Stripe ba_…, card_…, acct_…; Razorpay fa_…), 1–255 of A-Z, a-z, 0-9, _ . : @ + -")
	}
	c.chars("purpose", "mandate.text", m.GetPurpose(), visibleText,
		"cannot be shown as it is stored", "write purpose as one line of visible text")
	c.chars("provenance.rail_host", "mandate.rail_host", m.GetProvenance().GetRailHost(), hostByte,
		"is not a host", "a host is printable ASCII without spaces (an internationalised name in its xn-- form)")
	c.chars("provenance.api_version", "mandate.api_version", m.GetProvenance().GetApiVersion(), headerByte,
		"is not an API version", "an API version is printable ASCII, as its header carries it")
}

// chars reports the first character of s that ok refuses, saying what it
// is and what precedes it: the owner cannot see an invisible one.
func (c *checker) chars(path, rule, s string, ok func(rune) bool, what, want string) {
	for i, r := range s {
		if ok(r) {
			continue
		}
		subject := what
		if len(s) <= 255 {
			subject = fmt.Sprintf("%q %s", s, what)
		}
		c.add(path, rule, "%s: %s it holds %s; %s", subject, where(s[:i]), runeName(r), want)
		return
	}
}

// runeName is "U+202E, an invisible format character (…)" and the like.
func runeName(r rune) string {
	code := fmt.Sprintf("U+%04X", r)
	switch {
	case r == ' ':
		return "a space"
	case r == '\t':
		return "a tab"
	case r == '\n' || r == '\r':
		return "a line break (" + code + ")"
	case r == 0:
		return "a NUL (U+0000)"
	case unicode.Is(unicode.Cc, r):
		return code + ", a control character"
	case unicode.Is(unicode.Cf, r):
		return code + ", an invisible format character (it can hide or reorder the text around it)"
	case unicode.In(r, unicode.Zl, unicode.Zp):
		return code + ", a line separator"
	case unicode.IsSpace(r):
		return code + ", a space character"
	case r >= utf8.RuneSelf:
		return fmt.Sprintf("%s (%c), a non-ASCII character (it may look like an ASCII one)", code, r)
	}
	return fmt.Sprintf("%q", r)
}

// where says where in the string the refused character is.
func where(before string) string {
	if before == "" {
		return "at the start"
	}
	const keep = 32
	if n := utf8.RuneCountInString(before); n > keep {
		rs := []rune(before)
		before = "…" + string(rs[n-keep:])
	}
	return fmt.Sprintf("after %q", before)
}
