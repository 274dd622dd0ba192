package rail

import "bytes"

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
