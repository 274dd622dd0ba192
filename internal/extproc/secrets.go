package extproc

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/countersign/countersign/internal/secrets"
)

// A read through Envoy (an exchange ext_authz allowed with no intent: a
// REST GET, an MCP read-only tools/call, initialize, ping, the GET event
// stream, …, or a local reply, which Envoy sends through ext_proc's
// response phases alone: a replayed stored answer) leaves with the
// account's secret key, and its answer goes to the agent without Stripe's
// client secrets (package secrets). The Stripe adapter refuses the reads
// that would embed one (expand), but a PaymentIntent read by its own path
// carries it. A JSON answer or event stream that cannot be read for that
// is withheld, as is an encoded one; an identity-encoded answer of
// another media type (an MCP server's text/plain 404 ending a session)
// goes with the secrets its raw bytes hold redacted (secrets.RedactTokens).

// readRequest answers the request headers of a read: the rail is asked
// for its answer uncompressed, which readAnswer must read.
func readRequest() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{setHeader("accept-encoding", "identity")},
		}},
	}}}
}

// encodedAnswer says why the headers of an answer announce a body whose
// bytes are not its content ("" when they are): a content coding other
// than identity, which package secrets does not read.
func encodedAnswer(h map[string]string) string {
	if ce, ok := h["content-encoding"]; ok {
		for _, c := range strings.Split(ce, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "identity" && c != "" {
				return "its answer is encoded (" + c + ")"
			}
		}
	}
	return ""
}

// withholdRead replaces the answer to a read, which could not be read to
// remove its secrets, with Countersign's error: a local reply, which
// Envoy sends downstream in place of the answer it still holds (BUFFERED:
// the headers are held with the body). It keeps the rail's status when
// that is an error (an MCP server's 404 ends a session, which its client
// must see to start another: found by a review); a success it could not
// check is a 502.
func (s *Server) withholdRead(x *exchange, why string) *extprocv3.ProcessingResponse {
	x.readWithheld = true
	s.log.Warn("the answer to a read cannot be checked for secrets; the agent receives an error in its place", "status", x.status, "why", why)
	msg, err := json.Marshal("Countersign withheld the rail's answer to this read (HTTP " + strconv.Itoa(x.status) + "): " + why +
		", so it could not remove what the agent may not see (a client_secret, a card's details); nothing was changed at the rail.")
	if err != nil { // unreachable: a string
		msg = []byte(`"Countersign withheld the rail's answer to this read."`)
	}
	status := http.StatusBadGateway
	if x.status >= 400 && x.status <= 599 {
		status = x.status
	}
	body := []byte(`{"error":{"type":"api_error","code":"countersign_read_withheld","message":` + string(msg) + `}}`)
	return immediate(status, body, "countersign_read_withheld")
}

// readAnswer answers a body phase of a read's answer by its Content-Type:
// JSON (secrets.ScrubJSON) or an event stream (secrets.ScrubEventStream),
// withheld when it cannot be read; any other media type with its raw
// bytes' secrets redacted (secrets.RedactTokens); unchanged when it holds
// no secret, without its secrets otherwise (content-length kept right);
// withheld when encoded. Envoy's BUFFERED mode sends the whole body in one
// phase, so each phase is judged as the whole answer; a part of JSON would
// not parse and is withheld (fail closed).
func (s *Server) readAnswer(x *exchange, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	cont := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
	in := b.GetBody()
	if len(in) == 0 {
		return cont // nothing to hide
	}
	if why := encodedAnswer(x.headers); why != "" {
		return s.withholdRead(x, why)
	}
	var out []byte
	var n int
	switch secrets.KindOf(x.headers["content-type"]) {
	case secrets.Other:
		// Neither JSON nor an event stream (a text/plain error, a page):
		// no grammar to hide a secret in that the agent would decode; its
		// bytes go with their secret tokens redacted.
		out, n = secrets.RedactTokens(in)
	case secrets.EventStream:
		var err error
		if out, n, err = secrets.ScrubEventStream(in); err != nil {
			return s.withholdRead(x, err.Error())
		}
	default:
		var err error
		if out, n, err = secrets.ScrubJSON(in); err != nil {
			return s.withholdRead(x, "its answer is not JSON")
		}
	}
	if n == 0 {
		return cont
	}
	s.log.Info("removed secrets from the answer to a read", "members", n, "status", x.status)
	return scrubbedBody(x, out)
}

// scrubAgentCopy returns the answer to a money call as the agent is to
// receive it (secrets.ScrubAnswer): scrubbed, and where it cannot be
// parsed, its raw bytes' secret tokens redacted; never withheld, as the
// call's outcome is the agent's to read (found by a review: such answers,
// and one followed by trailers, went as they came). The ledger keeps the
// rail's answer as it came.
func scrubAgentCopy(h map[string]string, body []byte) ([]byte, int) {
	return secrets.ScrubAnswer(h["content-type"], body)
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
