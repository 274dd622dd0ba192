// Package secrets removes from a rail's answer what the agent may not
// see: Stripe's client secrets, and a card's and its holder's details
// (CardMembers).
//
// Stripe puts in some objects a secret meant only for the paying
// customer: a PaymentIntent's client_secret (a SetupIntent's, a source's,
// a Checkout Session's), which with the account's publishable key
// confirms the PaymentIntent (a charge Countersign never sees). An answer
// reaches the agent with every member of that name removed, at any depth,
// and every client secret inside a string value replaced by Redacted (a
// PaymentIntent awaiting the customer's action repeats its own in
// next_action's URL, beside the publishable key; an MCP tool's answer
// carries the rail's objects JSON-stringified in a text item). Only the
// secret itself goes: a value that merely names client_secret (a
// documentation search's answer) is kept (found by a review: such strings
// were emptied whole). ext_proc scrubs every answer the agent receives
// through Envoy with it; the engine, the stored answers it replays.
package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
)

// Member is the member an answer loses before the agent sees it.
// Removed rather than nulled: it is optional in Stripe's SDKs' types.
const Member = "client_secret"

// CardMembers are the members an answer loses because they hold a card
// or its holder's details, which Countersign does not hand the agent
// (found by a review: a Stripe charge read carried the cardholder's name,
// email, phone and address in billing_details and the card's brand,
// country, last digits, expiry and fingerprint in payment_method_details;
// the Razorpay adapter refused expand[]=card for the same data). They are
// Stripe's billing_details and payment_method_details (a charge's, a
// PaymentMethod's), a card object wherever it sits (a PaymentMethod's, a
// refund's destination_details', a Razorpay card), a Razorpay payment's
// UPI address (vpa), a Stripe charge's or PaymentIntent's shipping (name,
// phone, postal address); and a payment_method or a source whose value is
// an object (a PaymentIntent's last_payment_error carries the whole
// PaymentMethod, a legacy charge its Card under source: found by a review
// of this list; as an id either is kept). Removed, at any depth, as
// client_secret is. A customer's contact details (an email, a phone: a
// Stripe receipt_email, a Razorpay payment's email and contact) are kept:
// a support agent finds the payment to refund by them.
var CardMembers = []string{"billing_details", "payment_method_details", "card", "vpa", "shipping"}

// cardObjectMembers are removed only when their value is an object.
var cardObjectMembers = []string{"payment_method", "source"}

// ErrNotJSON is an answer ScrubJSON cannot read.
var ErrNotJSON = errors.New("the answer is not one JSON value")

// ScrubJSON returns body without any object member whose name, decoded
// and compared as Go's JSON decoder matches a field (case-insensitively),
// is client_secret, at any depth, and with every client secret
// (clientSecretRE, on the decoded string) inside a string value replaced
// by Redacted, and how many it removed. Everything else is kept byte for
// byte, but for the whitespace between members of an object it changed
// and the escapes of a string it changed (re-encoded from its decoded
// value); with nothing removed, body itself is returned. A body that is
// not one valid JSON value is an error.
func ScrubJSON(body []byte) ([]byte, int, error) {
	if !json.Valid(body) {
		return nil, 0, ErrNotJSON
	}
	s := scrubber{in: body, out: make([]byte, 0, len(body))}
	s.value()
	if s.removed == 0 {
		return body, 0, nil
	}
	return s.out, s.removed, nil
}

// scrubber copies a valid JSON text (json.Valid, which also bounds its
// nesting) from in to out, leaving out secret members.
type scrubber struct {
	in, out []byte
	i       int
	removed int
}

func (s *scrubber) ws() {
	for s.i < len(s.in) {
		switch s.in[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value copies the value at s.i.
func (s *scrubber) value() {
	s.ws()
	switch s.in[s.i] {
	case '{':
		s.object()
	case '[':
		s.array()
	case '"':
		start := s.i
		s.skipString()
		if v, n := withoutSecrets(s.in[start:s.i]); n > 0 {
			// A client secret inside a value: a PaymentIntent awaiting the
			// customer's action carries its own in next_action's URL
			// (payment_intent_client_secret=pi_…_secret_…, beside the
			// publishable key; found by a review). The secret goes, the
			// rest of the string stays. So do the members of JSON held
			// in a string (an MCP tool's text item).
			s.removed += n
			s.out = append(s.out, v...)
			return
		}
		s.out = append(s.out, s.in[start:s.i]...)
	default: // a number, true, false or null
		start := s.i
		for s.i < len(s.in) {
			c := s.in[s.i]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				break
			}
			s.i++
		}
		s.out = append(s.out, s.in[start:s.i]...)
	}
}

func (s *scrubber) skipString() {
	s.i++ // the opening quote
	for s.in[s.i] != '"' {
		if s.in[s.i] == '\\' {
			s.i++
		}
		s.i++
	}
	s.i++
}

func (s *scrubber) object() {
	s.i++
	s.out = append(s.out, '{')
	first := true
	for {
		s.ws()
		switch s.in[s.i] {
		case '}':
			s.i++
			s.out = append(s.out, '}')
			return
		case ',':
			s.i++
			s.ws()
		}
		start := s.i
		s.skipString()
		key := s.in[start:s.i]
		s.ws()
		s.i++ // ':'
		s.ws()
		if removedMember(key, s.in[s.i] == '{') {
			s.removed++
			mark := len(s.out)
			s.value()
			s.out = s.out[:mark]
			continue
		}
		if !first {
			s.out = append(s.out, ',')
		}
		first = false
		s.out = append(s.out, key...)
		s.out = append(s.out, ':')
		s.value()
	}
}

func (s *scrubber) array() {
	s.i++
	s.out = append(s.out, '[')
	for {
		s.ws()
		switch s.in[s.i] {
		case ']':
			s.i++
			s.out = append(s.out, ']')
			return
		case ',':
			s.i++
			s.out = append(s.out, ',')
		}
		s.value()
	}
}

// removedMember reports whether the JSON string raw (quotes included)
// names a member the agent may not see (Member, CardMembers, payment_method
// or source when object says its value is one, a name holding a client
// secret) as a client would
// read it: escapes decoded, and compared with Unicode case folding, which
// matches all that Go's encoding/json matches a struct field with (it
// folds case, "ſ" and the Kelvin sign too) and more.
func removedMember(raw []byte, object bool) bool {
	name := string(raw[1 : len(raw)-1])
	if strings.IndexByte(name, '\\') >= 0 {
		if err := json.Unmarshal(raw, &name); err != nil {
			return true // unreadable: not kept (unreachable after json.Valid)
		}
	}
	if strings.EqualFold(name, Member) || clientSecretRE.MatchString(name) {
		return true
	}
	for _, m := range CardMembers {
		if strings.EqualFold(name, m) {
			return true
		}
	}
	for _, m := range cardObjectMembers {
		if object && strings.EqualFold(name, m) {
			return true
		}
	}
	return false
}

// clientSecretRE matches a Stripe client secret as the token it is: an
// object's id, "_secret_" and the secret (pi_…_secret_…, seti_…_secret_…,
// a Checkout Session's cs_test_…_secret_…, payatt_…_secret_…), or a
// prefix ending in "secret_" and the secret (src_client_secret_…,
// cuss_secret_…): word segments joined by underscores, one of them
// "secret" with a segment before and after it. Matched case-insensitively
// on the decoded string; a word that merely names it (client_secret,
// payment_intent_client_secret=) is no match.
var clientSecretRE = regexp.MustCompile(`(?i)\b(?:[a-z0-9]+_)+secret(?:_[a-z0-9]+)+`)

// rawSecretRE is clientSecretRE on bytes that no parser decoded: each
// underscore may also be written as a JSON escape (\u005f) or a URL's
// percent-encoding (%5F), as a reader of those bytes would decode it.
var rawSecretRE = regexp.MustCompile(`(?i)\b(?:[a-z0-9]+(?:_|\\u005f|%5f))+secret(?:(?:_|\\u005f|%5f)[a-z0-9]+)+`)

// Redacted is what a client secret is replaced with. It holds no match of
// either expression, so scrubbing again finds nothing.
const Redacted = "[removed by Countersign]"

// withoutSecrets returns the JSON string raw (quotes included), its
// escapes decoded, scrubbed and re-encoded, and how many it removed (0:
// out is nil, raw is kept). A string that is itself a JSON object or
// array (the rail's objects JSON-stringified in an MCP tool's text item)
// is scrubbed as JSON (ScrubJSON: its members too); in any other each
// client secret (clientSecretRE) is replaced by Redacted.
func withoutSecrets(raw []byte) (out []byte, n int) {
	v := string(raw[1 : len(raw)-1])
	if strings.IndexByte(v, '\\') >= 0 {
		if err := json.Unmarshal(raw, &v); err != nil {
			return []byte(`""`), 1 // unreadable: not kept (unreachable after json.Valid)
		}
	}
	var inner []byte
	err := ErrNotJSON
	if isContainer(v) {
		inner, n, err = ScrubJSON([]byte(v))
	}
	if err == nil {
		if n == 0 {
			return nil, 0
		}
		v = string(inner)
	} else {
		if !clientSecretRE.MatchString(v) {
			return nil, 0
		}
		v, n = clientSecretRE.ReplaceAllLiteralString(v, Redacted), 1
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a URL's & stays as it came
	if err := enc.Encode(v); err != nil {
		return []byte(`""`), n // unreachable: a string
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), n
}

// isContainer reports whether the JSON text v is an object or an array.
func isContainer(v string) bool {
	t := strings.TrimLeft(v, " \t\n\r")
	return t != "" && (t[0] == '{' || t[0] == '[')
}

// RedactTokens returns body with every client secret its bytes hold
// (rawSecretRE) replaced by Redacted, and how many; with none, body
// itself. It reads no grammar: it is for an answer no parser here reads
// (text/plain, HTML, a JSON answer ScrubJSON refuses), whose bytes the
// agent sees as they are.
func RedactTokens(body []byte) ([]byte, int) {
	n := 0
	out := rawSecretRE.ReplaceAllFunc(body, func([]byte) []byte {
		n++
		return []byte(Redacted)
	})
	if n == 0 {
		return body, 0
	}
	return out, n
}

// Kind is how an identity-encoded answer is read for secrets, by its
// media type.
type Kind int

const (
	// JSON is an answer declared JSON (application/json, …+json), or undeclared.
	JSON Kind = iota
	// EventStream is an answer declared text/event-stream (ScrubEventStream).
	EventStream
	// Other is an answer of any other media type, read as raw bytes (RedactTokens).
	Other
)

// KindOf is the Kind of an answer of Content-Type ct ("" when it has
// none).
func KindOf(ct string) Kind {
	if ct == "" {
		return JSON
	}
	switch mt := mediaType(ct); {
	case mt == eventStream:
		return EventStream
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return JSON
	default:
		return Other
	}
}

// eventStream is the media type of a server-sent event stream.
const eventStream = "text/event-stream"

// mediaType is the media type of a Content-Type value, lower-cased.
func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// ScrubAnswer returns an answer of Content-Type ct ("" when it has none)
// as an agent may receive it, and how many secrets it removed: scrubbed by
// its Kind (ScrubJSON, ScrubEventStream), and, where that cannot read it
// (an event stream with an event that is not JSON, JSON behind a byte
// order mark, another media type), with its raw bytes' secret tokens
// redacted (RedactTokens). It never refuses: it is for an answer whose
// content is the agent's to read (a money call's outcome, a replayed
// stored answer), not withheld when unreadable. Its body must be
// identity-encoded; an encoded one's bytes are not its content and come
// back unchanged, unless they happen to hold a token.
func ScrubAnswer(ct string, body []byte) ([]byte, int) {
	if len(body) == 0 {
		return body, 0
	}
	var out []byte
	var n int
	var err error
	switch KindOf(ct) {
	case EventStream:
		out, n, err = ScrubEventStream(body)
	case JSON:
		out, n, err = ScrubJSON(body)
	default:
		err = ErrNotJSON
	}
	if err != nil {
		return RedactTokens(body)
	}
	return out, n
}
