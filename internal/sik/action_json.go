package sik

import (
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// appendCanonical appends the RFC 8785 form of a validated action to dst:
// the bytes Canonicalize(json.Marshal(a)) gives (TestActionCanonicalIsJCS
// holds it to that, over every string rapid can draw), written directly
// from the struct. Every decision keys its action and its alias, and the
// round trip through encoding/json and the JCS parser cost 75 allocations
// and most of the engine's CPU outside I/O for an action of a handful of
// fields.
//
// It relies on what Validate guarantees: every string is valid UTF-8, and
// the numbers are integers no larger than 2^53-1, which JCS writes as plain
// decimal digits.
func appendCanonical(dst []byte, a Action) []byte {
	// Members in the order of their names' UTF-16 code units (all ASCII
	// here, so byte order).
	dst = append(dst, `{"action":`...)
	dst = appendString(dst, a.Action)
	dst = append(dst, `,"amount_minor":`...)
	dst = strconv.AppendInt(dst, a.AmountMinor, 10)
	dst = append(dst, `,"currency":`...)
	dst = appendString(dst, a.Currency)
	dst = append(dst, `,"distinct":`...)
	dst = appendString(dst, a.Distinct)
	dst = append(dst, `,"extra":{`...)
	keys := slices.SortedFunc(maps.Keys(a.Extra), compareUTF16)
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k)
		dst = append(dst, ':')
		dst = appendString(dst, a.Extra[k])
	}
	dst = append(dst, `},"rail_account":`...)
	dst = appendString(dst, a.RailAccount)
	dst = append(dst, `,"subject":`...)
	dst = appendString(dst, a.Subject)
	dst = append(dst, `,"v":`...)
	dst = strconv.AppendInt(dst, int64(a.V), 10)
	dst = append(dst, `,"window":`...)
	dst = appendString(dst, a.Window)
	return append(dst, '}')
}

// appendString writes s as RFC 8785 §3.2.2.2 does (ECMAScript's
// JSON.stringify): the quote, the backslash and the controls below U+0020
// escaped (the five with short forms as \b \t \n \f \r, the rest as \u00xx
// in lower-case hex), everything else as its own UTF-8 bytes.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// compareUTF16 orders two valid UTF-8 strings by their UTF-16 code units,
// as RFC 8785 §3.2.3 sorts member names. That is code point order except
// where a character above U+FFFF (a surrogate pair, from 0xD800) meets one
// from U+E000 to U+FFFF.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return int(utf16Unit(ra)) - int(utf16Unit(rb))
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

// utf16Unit is a code point's ordering value by its UTF-16 encoding: its
// first unit (the high surrogate above U+FFFF) shifted up, with the low
// surrogate below, so that two characters above U+FFFF compare by both.
func utf16Unit(r rune) uint32 {
	if r < 0x10000 {
		return uint32(r) << 10
	}
	r -= 0x10000
	return (0xD800+uint32(r>>10))<<10 | uint32(r&0x3FF)
}
