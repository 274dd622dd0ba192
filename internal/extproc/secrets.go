package extproc

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// A read through Envoy (an exchange ext_authz allowed with no intent: a
// REST GET, an MCP read-only tools/call, initialize, ping, the GET event
// stream, …) leaves
// with the account's secret key, and its answer goes to the agent. Stripe
// puts in some objects a secret meant only for the paying customer: a
// PaymentIntent's client_secret, which with the account's publishable key
// confirms the PaymentIntent (a charge Countersign never sees). The
// Stripe adapter refuses the reads that would embed one (expand), but a
// PaymentIntent read by its own path carries it, so the answer to a read
// reaches the agent only with every member of that name removed, at any
// depth, and every string value that holds a client secret emptied (a
// PaymentIntent awaiting the customer's action repeats its own in
// next_action's URL, beside the publishable key); an answer that cannot be
// read for that (compressed, neither JSON nor an event stream, an event
// whose data is not JSON) is withheld (found by reviews). An MCP tool's
// answer carries the rail's objects JSON-stringified in a text item: that
// string holds "client_secret" and the secret, and is emptied whole.

// secretMember is the member an answer loses before the agent sees it.
// Removed rather than nulled: it is optional in Stripe's SDKs' types.
const secretMember = "client_secret"

// errAnswerNotJSON is an answer the scrubber cannot read.
var errAnswerNotJSON = errors.New("the answer is not one JSON value")

// ScrubSecrets returns body without any object member whose name, decoded
// and compared as Go's JSON decoder matches a field (case-insensitively),
// is client_secret, at any depth, and with every string value that holds a
// client secret (clientSecretRE, on the decoded string) replaced by "",
// and how many it removed. Everything else
// is kept byte for byte, but for the whitespace between members of an
// object it changed; with nothing removed, body itself is returned. A body
// that is not one valid JSON value is an error.
func ScrubSecrets(body []byte) ([]byte, int, error) {
	if !json.Valid(body) {
		return nil, 0, errAnswerNotJSON
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
		if holdsSecret(s.in[start:s.i]) {
			// A client secret inside a value: a PaymentIntent awaiting the
			// customer's action carries its own in next_action's URL
			// (payment_intent_client_secret=pi_…_secret_…, beside the
			// publishable key; found by a review).
			s.removed++
			s.out = append(s.out, '"', '"')
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
		if isSecretKey(key) {
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

// isSecretKey reports whether the JSON string raw (quotes included) names
// the secret member as a client would read it: escapes decoded, and
// compared with Unicode case folding, which matches all that Go's
// encoding/json matches a struct field with (it folds case, "ſ" and the
// Kelvin sign too) and more.
func isSecretKey(raw []byte) bool {
	name := string(raw[1 : len(raw)-1])
	if strings.IndexByte(name, '\\') >= 0 {
		if err := json.Unmarshal(raw, &name); err != nil {
			return true // unreadable: not kept (unreachable after json.Valid)
		}
	}
	return strings.EqualFold(name, secretMember)
}

// clientSecretRE matches a Stripe client secret however it is embedded:
// a PaymentIntent's, SetupIntent's or source's (pi_…_secret_…,
// seti_…_secret_…, src_client_secret_…), or any client_secret named as a
// URL's query parameter. Matched case-insensitively on the decoded string.
var clientSecretRE = regexp.MustCompile(`(?i)_secret_|client_secret`)

// holdsSecret reports whether the JSON string raw (quotes included), its
// escapes decoded, holds a client secret (clientSecretRE).
func holdsSecret(raw []byte) bool {
	v := string(raw[1 : len(raw)-1])
	if strings.IndexByte(v, '\\') >= 0 {
		if err := json.Unmarshal(raw, &v); err != nil {
			return true // unreadable: not kept (unreachable after json.Valid)
		}
	}
	return clientSecretRE.MatchString(v)
}

// readRequest answers the request headers of a read: the rail is asked
// for its answer uncompressed, which readAnswer must read.
func readRequest() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{setHeader("accept-encoding", "identity")},
		}},
	}}}
}

// unreadableRead says why the headers of a read's answer announce a body
// the scrubber cannot read ("" when it can): a content coding other than
// identity, or a media type that is neither JSON nor an event stream.
func unreadableRead(h map[string]string) string {
	if ce, ok := h["content-encoding"]; ok {
		for _, c := range strings.Split(ce, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "identity" && c != "" {
				return "its answer is encoded (" + c + ")"
			}
		}
	}
	if ct, ok := h["content-type"]; ok {
		if mt := mediaType(ct); mt != "application/json" && !strings.HasSuffix(mt, "+json") && mt != eventStream {
			return "its answer is neither JSON nor an event stream (" + mt + ")"
		}
	}
	return ""
}

// eventStream is the media type of a server-sent event stream.
const eventStream = "text/event-stream"

// mediaType is the media type of a Content-Type value, lower-cased.
func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// withholdRead replaces the answer to a read, which could not be read to
// remove its secrets, with Countersign's error: a local reply, which
// Envoy sends downstream in place of the answer it still holds (BUFFERED:
// the headers are held with the body).
func (s *Server) withholdRead(x *exchange, why string) *extprocv3.ProcessingResponse {
	x.readWithheld = true
	s.log.Warn("the answer to a read cannot be checked for secrets; the agent receives an error in its place", "status", x.status, "why", why)
	msg, err := json.Marshal("Countersign withheld the rail's answer to this read (HTTP " + strconv.Itoa(x.status) + "): " + why +
		", so it could not remove what the agent may not see (a client_secret); nothing was changed at the rail.")
	if err != nil { // unreachable: a string
		msg = []byte(`"Countersign withheld the rail's answer to this read."`)
	}
	body := []byte(`{"error":{"type":"api_error","code":"countersign_read_withheld","message":` + string(msg) + `}}`)
	return immediate(http.StatusBadGateway, body, "countersign_read_withheld")
}

// readAnswer answers a body phase of a read's answer, JSON or an event
// stream (ScrubEventStream) by its Content-Type: unchanged when it
// holds no secret, without its secrets otherwise (content-length kept
// right), withheld when it cannot be read. Envoy's BUFFERED mode sends the
// whole body in one phase, so each phase is judged as the whole answer; a
// part would not parse and is withheld (fail closed).
func (s *Server) readAnswer(x *exchange, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	cont := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
	in := b.GetBody()
	if len(in) == 0 {
		return cont // nothing to hide
	}
	if why := unreadableRead(x.headers); why != "" {
		return s.withholdRead(x, why)
	}
	scrub, unreadable := ScrubSecrets, "its answer is not JSON"
	if ct, ok := x.headers["content-type"]; ok && mediaType(ct) == eventStream {
		scrub, unreadable = ScrubEventStream, ""
	}
	out, n, err := scrub(in)
	if err != nil {
		if unreadable == "" {
			unreadable = err.Error()
		}
		return s.withholdRead(x, unreadable)
	}
	if n == 0 {
		return cont
	}
	s.log.Info("removed secrets from the answer to a read", "members", n, "status", x.status)
	return scrubbedBody(x, out)
}

// scrubbedBody is the body mutation that sends out in place of the
// answer, with a declared length that is its own.
func scrubbedBody(x *exchange, out []byte) *extprocv3.ProcessingResponse {
	var set []*corev3.HeaderValueOption
	if _, ok := x.headers["content-length"]; ok {
		set = append(set, setHeader("content-length", strconv.Itoa(len(out))))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: out}},
		},
	}}}
}
