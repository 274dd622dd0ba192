package rail

import (
	"bytes"
	"errors"
)

// jsonSpace is JSON's whitespace (RFC 8259 §2): space, tab, line feed and
// carriage return, and nothing else.
const jsonSpace = " \t\n\r"

// TrimJSONSpace trims JSON's whitespace from both ends of a JSON body.
// bytes.TrimSpace also trims a form feed, a vertical tab, U+0085 and
// U+00A0, which no JSON reader skips: a body led by one is not JSON to the
// rail, which may refuse it or read no parameters at all (a full refund
// where the agent's body asked for part). Such a body must stay
// unparseable here too.
func TrimJSONSpace(body []byte) []byte {
	return bytes.Trim(body, jsonSpace)
}

// ErrLoneSurrogate is CheckEscapes's refusal: a \u escape names half of a
// UTF-16 surrogate pair without the other half.
var ErrLoneSurrogate = errors.New("a \\u escape names half of a UTF-16 surrogate pair without the other; JSON readers disagree on it")

// CheckEscapes refuses a JSON text that escapes a lone UTF-16 surrogate
// (\ud800 with no \udc00…\udfff after it, or a lone \udc00…\udfff). Go
// reads one as U+FFFD and JavaScript keeps it, but PHP's json_decode fails
// on the whole body: a rail behind PHP would read none of its parameters
// (a full refund where the body asked for part). text must be JSON that
// a decoder accepted: a backslash then only occurs inside a string.
func CheckEscapes(text []byte) error {
	for i := 0; i < len(text); i++ {
		if text[i] != '\\' {
			continue
		}
		if i+1 < len(text) && text[i+1] != 'u' {
			i++ // \\, \", \n, …: the escaped byte is not an escape's start
			continue
		}
		r, ok := hex4(text, i+2)
		if !ok {
			continue // not JSON; the decoder refuses it
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return ErrLoneSurrogate
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := hex4(text, i+8)
			if !ok || text[i+6] != '\\' || text[i+7] != 'u' || lo < 0xDC00 || lo > 0xDFFF {
				return ErrLoneSurrogate
			}
			i += 11
		default:
			i += 5
		}
	}
	return nil
}

// hex4 reads the four hex digits at text[at:], if there are four.
func hex4(text []byte, at int) (rune, bool) {
	if at < 0 || at+4 > len(text) {
		return 0, false
	}
	var r rune
	for _, c := range text[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
