package extproc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/internal/chaos"
	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/extauthz"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/mcp"
	"github.com/countersign/countersign/internal/telemetry"
)

// Committer records the rail's answer to an attempt (engine.Engine).
type Committer interface {
	Commit(ctx context.Context, ref engine.IntentRef, resp rail.Response) (ledger.Intent, rail.Classification, error)
	// MarkSent durably records, while the attempt is live, that its
	// request leaves with its body stamp or without, before it may leave.
	MarkSent(ctx context.Context, ref engine.IntentRef, stamped bool) (engine.IntentRef, error)
}

// Server implements envoy.service.ext_proc.v3.ExternalProcessor.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	committer Committer
	log       *slog.Logger
	tracer    trace.Tracer
}

// NewServer returns an ext_proc server.
func NewServer(c Committer, log *slog.Logger) *Server {
	return &Server{committer: c, log: log, tracer: telemetry.Tracer(nil)}
}

// WithTracing traces each exchange under tp, in a trace of its own linked
// to the one the HTTP request Envoy forwards names (its traceparent header,
// the agent's to write).
func (s *Server) WithTracing(tp trace.TracerProvider) *Server {
	s.tracer = telemetry.Tracer(tp)
	return s
}

// errResponseLost stands for a response that never came back through Envoy;
// errBodyLost for one whose headers came but whose body did not.
var (
	errResponseLost = errors.New("the rail's response was lost before it reached Countersign")
	errBodyLost     = errors.New("the rail's response body was lost before it reached Countersign")
)

// exchange is what one stream (one HTTP request through Envoy) has seen.
type exchange struct {
	ref       engine.IntentRef
	hasIntent bool
	status    int
	headers   map[string]string
	committed bool
	// sent: the request was recorded as leaving (markSent).
	sent bool
	// unreadable: ext_authz allowed an attempt whose metadata cannot be
	// read; the request is stopped (it would leave unmarked and
	// unstamped, which a listing could then prove absent).
	unreadable bool
	// agentID is the JSON-RPC id the agent's MCP call carried, which left
	// as ref.CallID: its answer is given back this id.
	agentID json.RawMessage
	// toolsList: an MCP tools/list read whose answer must match the
	// mandate's pins before the agent receives it (toolslist.go).
	toolsList *toolsList
	// read: an exchange ext_authz allowed with no intent (a read: a REST
	// GET, any MCP message but a money call), whose answer loses its
	// secrets before the agent receives it (secrets.go), but for a
	// tools/list judged against the mandate's pins, which is held to them
	// (toolslist.go); readWithheld: that answer was replaced by
	// Countersign's error.
	read, readWithheld bool
	// sawRequest: a request phase came. Envoy's processing mode sends
	// every request's headers, so an exchange without one is a local
	// reply (ext_authz's denial, which carries a replayed stored answer),
	// which Envoy encodes through ext_proc's response phases alone.
	sawRequest bool
}

// Process handles one HTTP exchange. Envoy opens a stream per request and
// sends its phases in order; each gets exactly one answer.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	var x exchange
	var span trace.Span
	defer func() {
		if span != nil {
			span.End()
		}
	}()
	defer func() {
		// The request was allowed and sent, but no response came back
		// through this stream: the outcome is ambiguous.
		if x.hasIntent && !x.committed {
			resp := rail.Response{TransportErr: errResponseLost}
			if x.status != 0 {
				// Headers arrived but the body did not (the stream was
				// reset, the rail stalled mid-body): ambiguous, whatever
				// the status says. A 4xx's body can make it ambiguous or
				// a fingerprint mismatch (Razorpay's GATEWAY_ERROR,
				// Stripe's idempotency_error); read as a rejection
				// without it, the intent would reopen under a new
				// idempotency key while the rail may have applied it.
				resp = rail.Response{Status: x.status, Headers: x.headers, TransportErr: errBodyLost}
			}
			s.commit(context.WithoutCancel(ctx), &x, resp)
		}
	}()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if span == nil {
			// The exchange's span starts with its first message, whose
			// request headers carry the trace context of the HTTP request
			// (linked, never continued).
			_, headers := headerMap(req.GetRequestHeaders().GetHeaders())
			ctx, span = telemetry.StartServer(ctx, s.tracer, "ext_proc.Process", headers)
		}
		if x.toolsList == nil {
			x.toolsList = toolsListOf(req)
		}
		if !x.hasIntent && !x.unreadable {
			if x.ref, x.hasIntent, x.unreadable = intentOf(req); x.hasIntent {
				span.SetAttributes(attribute.String("countersign.rail_account", x.ref.RailAccount), attribute.String("countersign.sik", x.ref.SIK),
					attribute.Int("countersign.attempt_seq", x.ref.AttemptSeq))
			}
		}
		resp := s.handle(ctx, &x, req)
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// intentOf reads the attempt ext_authz allowed from the forwarded dynamic
// metadata; unreadable when ext_authz's metadata names an attempt that
// cannot be read.
func intentOf(req *extprocv3.ProcessingRequest) (ref engine.IntentRef, ok, unreadable bool) {
	md := req.GetMetadataContext().GetFilterMetadata()[extauthz.MetadataNamespace]
	ref, ok = extauthz.IntentFromMetadata(md)
	return ref, ok, !ok && md.GetFields()["countersign"] != nil
}

func (s *Server) handle(ctx context.Context, x *exchange, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		x.sawRequest = true
		cont := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
		if x.unreadable {
			return s.stopUnreadable()
		}
		if !x.hasIntent {
			// With no intent, ext_authz allowed a read: money calls always
			// carry their attempt (an unreadable one stops here), and a
			// refused request never leaves. Whatever the method (an MCP
			// read-only tools/call is a POST: found by a review), its
			// answer loses its secrets, but for a pinned tools/list's.
			if l := x.toolsList; l == nil || l.check.OwnAnswer {
				x.read = true
				return readRequest()
			}
			return cont
		}
		if x.ref.BodySHA256 == emptyBody && (x.ref.BodyField != "" || x.ref.AmountField != "") {
			// Decided on an empty body (a Razorpay full refund sent with
			// none), which ext_authz read to its end: no data follows,
			// whether these headers end the stream or trailers will. It
			// leaves with a body of Countersign's (the stamp, the amount)
			// in place of the one it does not have.
			return s.replaceEmptyBody(x)
		}
		if !r.RequestHeaders.GetEndOfStream() {
			return cont
		}
		// Headers that end the stream: the request has no body, and no body
		// phase follows; it may leave only if the decided body was empty,
		// and then without the body stamp: its call has no place for one.
		if refusal := s.checkDecidedBody(x, nil, true); refusal != nil {
			return refusal
		}
		if refusal := s.markSent(x, false); refusal != nil {
			return refusal
		}
		return cont
	case *extprocv3.ProcessingRequest_RequestBody:
		// Request phases are checked each: a processing mode that skips
		// the headers (or metadata that first arrives with the body) must
		// not let an unreadable attempt leave unmarked and unstamped.
		x.sawRequest = true
		if x.unreadable {
			return s.stopUnreadable()
		}
		return s.requestBody(x, r.RequestBody)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if x.hasIntent {
			chaos.Point(chaos.DuringCall)
		}
		x.status, x.headers = headerMap(r.ResponseHeaders.GetHeaders())
		if !x.sawRequest && !x.hasIntent && x.toolsList == nil {
			// A local reply (no request phase): a replayed stored answer,
			// which the rail once gave to a money call with its secrets
			// in it, reaches the agent as a read's answer does (found by
			// a review: it went as it was stored).
			x.read = true
		}
		if x.hasIntent && r.ResponseHeaders.GetEndOfStream() {
			s.commit(ctx, x, rail.Response{Status: x.status, Headers: x.headers})
		}
		if l := x.toolsList; l != nil && !x.hasIntent && !l.check.OwnAnswer && notAListAnswer(x.status) {
			return s.toolsListElsewhere(x)
		}
		// A redirect sends the client, with its message, wherever the
		// server likes, where the answer is not checked (found by a
		// review): an MCP answer under pins, or to a money call, that
		// redirects is replaced whole; the call's outcome is recorded
		// first, on what the rail said.
		if isRedirect(x.status) {
			if l := x.toolsList; l != nil && !x.hasIntent && l.check.OwnAnswer {
				return s.answerElsewhere(x, l.check.RequestID)
			}
			if x.hasIntent && x.ref.CallID != "" && x.agentID != nil {
				if !x.committed {
					s.commit(ctx, x, rail.Response{Status: x.status, Headers: x.headers})
				}
				return s.answerElsewhere(x, x.agentID)
			}
		}
		if l := x.toolsList; l != nil && !l.check.OwnAnswer && r.ResponseHeaders.GetEndOfStream() && checksAnswer(x.status) {
			return s.toolsListHeaders(x)
		}
		if x.read && !x.hasIntent && !r.ResponseHeaders.GetEndOfStream() {
			if why := encodedAnswer(x.headers); why != "" {
				return s.withholdRead(x, why)
			}
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseBody:
		if x.toolsList != nil && !x.hasIntent {
			// An answer under pins is judged first; one that passes, if a
			// read's, is then scrubbed.
			if resp := s.toolsListBody(x, r.ResponseBody); !x.read || x.toolsList.withheld || resp.GetResponseBody().GetResponse() != nil {
				return resp
			}
		}
		if x.read && !x.hasIntent {
			if x.readWithheld {
				// A later phase of an answer already replaced: emptied.
				return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
					Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte{}}}},
				}}}
			}
			return s.readAnswer(x, r.ResponseBody)
		}
		cont := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
		if x.hasIntent && !r.ResponseBody.GetEndOfStream() {
			// A body phase that does not end the stream (BUFFERED mode,
			// then trailers: ext_proc.cc onTrailers) goes to the agent
			// without being committed here.
			if x.ref.CallID != "" && x.agentID != nil {
				// It may still answer nothing but the call.
				part := rail.Response{Status: x.status, Headers: x.headers, Body: r.ResponseBody.GetBody()}
				// Judged as the agent's id would read it (the call's own
				// answer names the id it left with).
				if re, _, err := mcp.Readdress(part, x.ref.CallID, x.agentID); err == nil {
					part.Body = re
				}
				if err := mcp.CheckOwnAnswer(part, x.agentID); err != nil {
					return s.withholdAnswer(x, x.agentID, err)
				}
			}
			// Without secrets, as an answer that ends the stream (found by
			// a review: one followed by trailers went as it came).
			if out, n := scrubAgentCopy(x.headers, r.ResponseBody.GetBody()); n > 0 {
				s.log.Info("removed secrets from the answer to a money call", "rail_account", x.ref.RailAccount, "sik", x.ref.SIK, "members", n)
				return scrubbedBody(x, out)
			}
			return cont
		}
		if !x.hasIntent {
			return cont
		}
		chaos.Point(chaos.AfterCallBeforeCommit)
		resp := rail.Response{Status: x.status, Headers: x.headers, Body: r.ResponseBody.GetBody()}
		s.commit(ctx, x, resp)
		chaos.Point(chaos.AfterCommitBeforeAck)
		return s.answerAgent(x, resp, cont)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		// Trailers that end a request that had no body phase (HTTP/2: its
		// headers did not end it, no data came): Envoy sends no body when
		// nothing was buffered (ext_proc.cc, Filter::onTrailers), so this
		// is the last message before it leaves, as with headers that end
		// the stream. A request already recorded (its body phase) or
		// stopped goes as it was answered.
		x.sawRequest = true
		if x.unreadable {
			return s.stopUnreadable()
		}
		if x.hasIntent && !x.sent && !x.committed {
			if refusal := s.checkDecidedBody(x, nil, true); refusal != nil {
				return refusal
			}
			if refusal := s.markSent(x, false); refusal != nil {
				return refusal
			}
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
	return &extprocv3.ProcessingResponse{}
}

// requestBody writes the body stamp of an allowed money-moving request. If
// the body cannot carry it, the request is stopped here — it never reaches
// the rail — and the attempt is recorded as not applied.
func (s *Server) requestBody(x *exchange, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	cont := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
	if !x.hasIntent {
		return cont
	}
	if refusal := s.checkDecidedBody(x, b.GetBody(), b.GetEndOfStream()); refusal != nil {
		return refusal
	}
	if x.ref.BodyField == "" && x.ref.AmountField == "" && x.ref.CallID == "" {
		// No place for the stamp: it leaves unstamped, marked so, while
		// its attempt is live.
		if refusal := s.markSent(x, false); refusal != nil {
			return refusal
		}
		return cont
	}
	body, refusal := s.outgoing(x, b.GetBody())
	if refusal != nil {
		return refusal
	}
	// In buffered mode the headers may be mutated with the body. The
	// stamped body leaves with the media type it is written in, whatever
	// the agent sent (rail.BodyMediaType says why).
	set := []*corev3.HeaderValueOption{setHeader("content-length", strconv.Itoa(len(body)))}
	if mt := rail.BodyMediaType(x.ref.BodyField); mt != "" {
		set = append(set, setHeader("content-type", mt))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
		},
	}}}
}

// outgoing is the body an allowed request leaves with (OutgoingBody),
// recorded as leaving (markSent, stamped if it carries the stamp); or the
// refusal that stops it here.
func (s *Server) outgoing(x *exchange, in []byte) ([]byte, *extprocv3.ProcessingResponse) {
	body, err := OutgoingBody(in, x.ref)
	if err == nil && x.ref.CallID != "" {
		// It leaves under Countersign's id; the agent's answer is given
		// back the agent's own.
		x.agentID, err = CallIDOf(in)
	}
	if err != nil {
		s.log.Error("body stamp failed; stopping the request", "rail_account", x.ref.RailAccount, "sik", x.ref.SIK, "err", err)
		msg := []byte(`{"error":{"type":"countersign_refusal","code":"body_unstampable","message":"Countersign could not stamp the request body; it was not sent."}}`)
		s.stoppedHere(x)
		return nil, immediate(http.StatusBadRequest, msg, "countersign_body_unstampable")
	}
	if refusal := s.markSent(x, x.ref.BodyField != ""); refusal != nil {
		return nil, refusal
	}
	return body, nil
}

// emptyBody is the digest ext_authz records for a request decided with no
// body.
var emptyBody = extauthz.BodyDigest(nil)

// replaceEmptyBody answers the request headers of a request decided with
// no body: it leaves with the body Countersign writes (the stamp, a full
// refund's amount), so that it is stamped like any other, and may be
// proven absent, and refunds what its intent holds. Envoy adds a body to a
// request that has none when the headers' answer is CONTINUE_AND_REPLACE
// with a body mutation: ProcessorState::handleHeadersResponse buffers it
// (addBufferedData, which FilterManager::addDecodedData takes from the
// gRPC callback), removes content-length, and sends no body or trailers
// phase after it (source/extensions/filters/http/ext_proc/
// processor_state.cc, the CONTINUE_AND_REPLACE branch; envoyproxy/envoy
// PR #16437 added it "to add a body to a request ... that does not have
// one"); the request then goes chunked (HTTP/1.1) or with a DATA frame.
func (s *Server) replaceEmptyBody(x *exchange) *extprocv3.ProcessingResponse {
	body, refusal := s.outgoing(x, nil)
	if refusal != nil {
		return refusal
	}
	var set []*corev3.HeaderValueOption
	if mt := rail.BodyMediaType(x.ref.BodyField); mt != "" {
		set = append(set, setHeader("content-type", mt))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{
			Status:         extprocv3.CommonResponse_CONTINUE_AND_REPLACE,
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
		},
	}}}
}

// answerAgent is the answer to a response body the agent is to receive: an
// MCP call's answer, which names the id the call left with
// (engine.IntentRef.CallID), is given back the id the agent sent, or its
// client could not match it to the call; anything else goes as it came
// (an answer naming another id is another request's, the engine took it
// for no answer of this call's, and it reaches the agent unchanged).
func (s *Server) answerAgent(x *exchange, resp rail.Response, cont *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	if x.ref.CallID == "" {
		// A rail's own answer to a money call (committed already, as it
		// came) reaches the agent without secrets too (package secrets): a
		// refund could embed its PaymentIntent.
		if out, n := scrubAgentCopy(x.headers, resp.Body); n > 0 {
			s.log.Info("removed secrets from the answer to a money call", "rail_account", x.ref.RailAccount, "sik", x.ref.SIK, "members", n)
			return scrubbedBody(x, out)
		}
		return cont
	}
	if x.agentID == nil {
		return cont
	}
	body, changed, err := mcp.Readdress(resp, x.ref.CallID, x.agentID)
	if err != nil {
		s.log.Error("could not give the answer the agent's id back", "rail_account", x.ref.RailAccount, "sik", x.ref.SIK, "err", err)
		body, changed = resp.Body, false
	}
	// What the agent receives may answer its call and nothing else: a
	// response to another of its requests in it (its pending tools/list,
	// with a poisoned list) would be taken by its client for that
	// request's (found by a review). The call's outcome is recorded
	// already; the agent then gets an error to its own id.
	var remove []string
	refused := false
	if ferr := mcp.CheckOwnAnswer(rail.Response{Status: resp.Status, Headers: resp.Headers, Body: body}, x.agentID); ferr != nil {
		s.log.Warn("MCP answer carries a response to another request; the agent receives an error in its place",
			"rail_account", x.ref.RailAccount, "sik", x.ref.SIK, "err", ferr)
		body, changed, refused = mcp.AnswerRefusal(x.agentID), true, true
		if _, ok := x.headers["content-encoding"]; ok {
			remove = append(remove, "content-encoding")
		}
	}
	if !refused {
		// Without secrets, as a REST money call's answer (above).
		if out, n := scrubAgentCopy(x.headers, body); n > 0 {
			s.log.Info("removed secrets from the answer to a money call", "rail_account", x.ref.RailAccount, "sik", x.ref.SIK, "members", n)
			body, changed = out, true
		}
	}
	if !changed {
		return cont
	}
	// The headers are held with the buffered body: a declared length must
	// be the new body's, which Envoy checks.
	var set []*corev3.HeaderValueOption
	if _, ok := x.headers["content-length"]; ok {
		set = append(set, setHeader("content-length", strconv.Itoa(len(body))))
	}
	if refused {
		set = append(set, setHeader("content-type", "application/json"))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
		},
	}}}
}

// markSent records, before an allowed request leaves, whether it carries
// its body stamp, in the statement that checks its attempt is still live
// (engine.MarkSent); x.ref is then marked and carries the intent as the
// mark found it. Every request with an intent leaves through it: the
// reconciler takes an attempt through Envoy that was never marked for one
// that never left, and a listing proves only a stamped one absent. On an
// error the request is stopped.
func (s *Server) markSent(x *exchange, stamped bool) *extprocv3.ProcessingResponse {
	marked, err := s.committer.MarkSent(context.Background(), x.ref, stamped)
	if err != nil {
		// Without the durable mark the reconciler could not tell a request
		// that left from one that never did: it does not leave.
		s.log.Error("could not record the request before it left; stopping it", "rail_account", x.ref.RailAccount, "sik", x.ref.SIK,
			"stamped", stamped, "err", err)
		// Nothing to commit: the request never left, and an attempt that is
		// no longer live (its lease lapsed, a newer one replaced it) has
		// been settled without it; a live one lapses to the reconciler.
		x.committed = true
		return immediate(http.StatusServiceUnavailable, []byte(`{"error":{"type":"countersign_refusal","code":"ledger_unavailable","message":"Countersign could not record the request before it left; it was not sent."}}`), "countersign_stamp_unrecorded")
	}
	x.ref, x.sent = marked, true
	return nil
}

// checkDecidedBody lets an allowed request's body leave only if it is,
// byte for byte, the body ext_authz decided on (its digest travels in the
// dynamic metadata) and it is whole (BUFFERED mode sends the whole body in
// one message with end_of_stream; anything else cannot be compared). A
// refusal stops the request here, and the attempt is recorded as not sent.
func (s *Server) checkDecidedBody(x *exchange, body []byte, whole bool) *extprocv3.ProcessingResponse {
	var msg, details string
	switch {
	case x.ref.BodySHA256 == "":
		msg, details = "Countersign has no record of the body it decided on; the request was not sent.", "countersign_body_unbound"
	case !whole:
		msg, details = "The request body reached Countersign in parts and cannot be compared with the one decided on; it was not sent.", "countersign_body_partial"
	case extauthz.BodyDigest(body) != x.ref.BodySHA256:
		msg, details = "The request body differs from the one Countersign decided on; it was not sent.", "countersign_body_changed"
	default:
		return nil
	}
	s.log.Error("request body is not the decided one; stopping the request", "rail_account", x.ref.RailAccount, "sik", x.ref.SIK,
		"attempt", x.ref.AttemptSeq, "why", details)
	refusal := []byte(`{"error":{"type":"countersign_refusal","code":"body_not_decided","message":"` + msg + `"}}`)
	s.stoppedHere(x)
	return immediate(http.StatusForbidden, refusal, details)
}

// errStoppedHere is the answer of an attempt ext_proc stopped before it
// left.
var errStoppedHere = errors.New("stopped by Countersign's ext_proc before it left for the rail")

// stoppedHere records an attempt ext_proc stopped before it left. It did
// not reach the rail, but a "rejected" answer would make the intent
// FAILED_TERMINAL, whose reopening takes a new stamp generation, a new
// idempotency key: an agent could then shed, at will, the key that makes
// the rail deduplicate a late copy of an earlier attempt. So it is
// recorded as ambiguous; the reconciler proves the absence by listing, and
// the retry keeps the key.
func (s *Server) stoppedHere(x *exchange) {
	s.commit(context.Background(), x, rail.Response{TransportErr: errStoppedHere})
}

func (s *Server) commit(ctx context.Context, x *exchange, resp rail.Response) {
	x.committed = true
	it, c, err := s.committer.Commit(ctx, x.ref, resp)
	if err != nil {
		// The lease expires and the reconciler settles the attempt.
		s.log.Error("commit failed; the reconciler will settle it", "rail_account", x.ref.RailAccount, "sik", x.ref.SIK,
			"attempt", x.ref.AttemptSeq, "err", err)
		return
	}
	s.log.Debug("committed", "rail_account", x.ref.RailAccount, "sik", x.ref.SIK, "attempt", x.ref.AttemptSeq,
		"outcome", c.Outcome.String(), "state", string(it.State))
}

// headerMap flattens Envoy's header map, reading :status.
func headerMap(m *corev3.HeaderMap) (int, map[string]string) {
	out := map[string]string{}
	status := 0
	for _, h := range m.GetHeaders() {
		v := h.GetValue()
		if v == "" && len(h.GetRawValue()) > 0 {
			v = string(h.GetRawValue())
		}
		k := strings.ToLower(h.GetKey())
		if k == ":status" {
			status, _ = strconv.Atoi(v)
			continue
		}
		if strings.HasPrefix(k, ":") {
			continue
		}
		// A header sent more than once is one list, as Envoy joins it for
		// its own headers and HTTP reads it (RFC 9110 §5.3): not the last
		// value alone, which a client that applies every content coding
		// would not read alike (found by a review: gzip, then identity).
		if prev, ok := out[k]; ok {
			v = prev + "," + v
		}
		out[k] = v
	}
	return status, out
}

func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// stopUnreadable stops a request whose attempt ext_authz allowed but whose
// metadata cannot be read: it would leave unmarked and unstamped.
func (s *Server) stopUnreadable() *extprocv3.ProcessingResponse {
	s.log.Error("ext_authz's attempt metadata cannot be read; stopping the request")
	return immediate(http.StatusServiceUnavailable, []byte(`{"error":{"type":"countersign_refusal","code":"attempt_unreadable","message":"Countersign could not read which attempt this request is; it was not sent."}}`), "countersign_attempt_unreadable")
}

// immediate stops the request at Envoy with a local reply: it never leaves.
func immediate(status int, body []byte, details string) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")}}}},
		Body:    body,
		Details: details,
	}}}
}
