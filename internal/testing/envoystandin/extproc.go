package envoystandin

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// The ext_proc filter (envoy.filters.http.ext_proc) is modelled with
//
//	processing_mode: {request_header_mode: SEND, request_body_mode: BUFFERED,
//	                  response_header_mode: SEND, response_body_mode: BUFFERED}
//	metadata_options: {forwarding_namespaces: {untyped: ["envoy.filters.http.ext_authz"]}}
//	mutation_rules: unset, allow_mode_override: false, max_message_timeout: unset
//
// One gRPC stream (ExternalProcessor/Process) per HTTP exchange, opened at
// the first message; each message gets exactly one answer, awaited for
// message_timeout.

// procStream is the filter's side of one Process stream.
type procStream struct {
	x      *exchange
	client extprocv3.ExternalProcessorClient

	ctx        context.Context
	cancel     context.CancelFunc
	stream     extprocv3.ExternalProcessor_ProcessClient
	recv       chan recvResult
	readerDone chan struct{}

	configSent bool // protocol_config goes on the first message only
	complete   bool // processing_complete_: no more messages on this exchange
	ended      bool // the server ended the stream (status received)
	reset      bool // close by cancelling (closeStream), not half-closing
}

type recvResult struct {
	resp *extprocv3.ProcessingResponse
	err  error // io.EOF: the server ended the stream with OK
}

type outcome int

const (
	answered outcome = iota
	closedOK         // onGrpcClose: processing completes, the exchange continues
	failed           // onGrpcError
	timedOut         // onMessageTimeout
)

func (s *procStream) open(ctx context.Context) error {
	if s.stream != nil {
		return nil
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	st, err := s.client.Process(s.ctx)
	if err != nil {
		s.cancel()
		s.cancel = nil
		return err
	}
	s.stream = st
	s.recv = make(chan recvResult, 16)
	s.readerDone = make(chan struct{})
	go s.read()
	return nil
}

// read delivers every message, then the stream's end, until cancelled.
func (s *procStream) read() {
	defer close(s.readerDone)
	for {
		m, err := s.stream.Recv()
		select {
		case s.recv <- recvResult{m, err}:
		case <-s.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (s *procStream) await(timeout time.Duration) (*extprocv3.ProcessingResponse, outcome) {
	if s.ended {
		return nil, closedOK
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		var r recvResult
		select {
		case r = <-s.recv:
		case <-s.readerDone:
			// The reader stops without a word only when the stream was
			// cancelled; what it delivered before is still read first.
			select {
			case r = <-s.recv:
			default:
				s.ended = true
				return nil, failed
			}
		case <-t.C:
			return nil, timedOut
		}
		if r.err != nil {
			s.ended = true
			if errors.Is(r.err, io.EOF) {
				return nil, closedOK
			}
			return nil, failed
		}
		// override_message_timeout needs max_message_timeout, which is
		// unset: Envoy ignores the message and keeps waiting.
		if r.resp.GetOverrideMessageTimeout() != nil {
			continue
		}
		return r.resp, answered
	}
}

// finish closes the stream when the exchange ends (the filter's
// onDestroy). Normally Envoy half-closes (CloseSend) and waits for the
// server to end the stream, up to the remote close timeout; after an error
// or a timeout it resets the stream instead.
func (s *procStream) finish() {
	if s.stream == nil {
		return
	}
	if !s.reset && !s.ended {
		_ = s.stream.CloseSend()
		t := time.NewTimer(remoteCloseTimeout)
	wait:
		for {
			select {
			case r := <-s.recv:
				if r.err != nil {
					break wait
				}
			case <-s.readerDone:
				break wait
			case <-t.C:
				break wait
			}
		}
		t.Stop()
	}
	s.cancel()
	<-s.readerDone
}

type phase int

const (
	requestHeaders phase = iota
	requestBody
	responseHeaders
	responseBody
)

// answers reports whether resp is the answer to ph. Anything else but an
// immediate response is spurious.
func (ph phase) answers(resp *extprocv3.ProcessingResponse) bool {
	switch resp.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return ph == requestHeaders
	case *extprocv3.ProcessingResponse_RequestBody:
		return ph == requestBody
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return ph == responseHeaders
	case *extprocv3.ProcessingResponse_ResponseBody:
		return ph == responseBody
	}
	return false
}

// call sends one ProcessingRequest and waits for its answer. It returns
// the answer; or a local reply that ends the exchange; or neither, when
// ext_proc is done and the exchange continues untouched.
func (x *exchange) call(ph phase, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, *response) {
	s := x.proc
	// The stream lives with the filter, not with the downstream request:
	// an agent that goes away makes Envoy destroy the filter, which
	// half-closes the stream (finish), rather than reset it.
	if err := s.open(x.p.base); err != nil {
		return nil, x.procFailed(failed)
	}
	// metadata_options.forwarding_namespaces.untyped: every message
	// carries the stream's dynamic metadata of those namespaces.
	req.MetadataContext = &corev3.Metadata{}
	if x.metadata != nil {
		req.MetadataContext.FilterMetadata = map[string]*structpb.Struct{
			MetadataNamespace: proto.Clone(x.metadata).(*structpb.Struct),
		}
	}
	if !s.configSent {
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  procmodev3.ProcessingMode_BUFFERED,
			ResponseBodyMode: procmodev3.ProcessingMode_BUFFERED,
		}
		s.configSent = true
	}
	// A Send that meets a finished stream returns io.EOF; the reason is
	// read from the stream's status.
	if err := s.stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, x.procFailed(failed)
	}
	resp, o := s.await(x.p.cfg.ExtProcMessageTimeout)
	switch o {
	case closedOK:
		s.complete = true
		return nil, nil
	case failed, timedOut:
		return nil, x.procFailed(o)
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		// The processor ends the exchange here, in any phase: a
		// request-phase immediate response is never forwarded. Nothing
		// more is sent on the stream, which is closed gracefully.
		s.complete = true
		return nil, x.immediateResponse(ir)
	}
	if !ph.answers(resp) {
		// A spurious message: fail open ignores the processor from here
		// on; fail closed answers status_on_error
		// (ext_proc_fail_close_spurious_resp).
		if x.p.cfg.ExtProcFailureModeAllow {
			s.complete, s.reset = true, true
			return nil, nil
		}
		return nil, x.procError()
	}
	return resp, nil
}

// procFailed is a stream failure or a message timeout. failure_mode_allow
// continues without ext_proc; otherwise the reply is status_on_error for a
// failure and 504 for a timeout. Either way the stream is reset.
func (x *exchange) procFailed(o outcome) *response {
	x.proc.complete, x.proc.reset = true, true
	if x.p.cfg.ExtProcFailureModeAllow {
		return nil
	}
	if o == timedOut {
		return localReply(504, nil, nil)
	}
	return localReply(x.p.cfg.ExtProcStatusOnError, nil, nil)
}

// procError is handleErrorResponse: an answer Envoy cannot apply (an
// invalid header, both value and raw_value, a content-length that does not
// match a mutated body, a spurious message) ends the exchange with
// status_on_error whatever failure_mode_allow says.
func (x *exchange) procError() *response {
	x.proc.complete, x.proc.reset = true, true
	return localReply(x.p.cfg.ExtProcStatusOnError, nil, nil)
}

// immediateResponse is the local reply of an ImmediateResponse: its status
// (200 when unset or below 200), its body, and its header mutation applied
// to the reply's default headers.
func (x *exchange) immediateResponse(ir *extprocv3.ImmediateResponse) *response {
	status := 200
	if ir.GetStatus() != nil {
		status = int(ir.GetStatus().GetCode())
	}
	if status < 200 || status > 999 {
		status = 200
	}
	lr := localReply(status, ir.GetBody(), nil)
	if m := ir.GetHeaders(); m != nil {
		// Envoy logs a failed mutation here and sends the reply anyway.
		_ = applyProcMutation(m, lr.headers, false)
	}
	return lr
}

// processRequest runs the request phases: request_headers, then, when the
// request has a body, request_body with the whole buffered body.
func (x *exchange) processRequest() *response {
	eos := !x.hasBody
	resp, lr := x.call(requestHeaders, &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers:     protoHeaders(x.req),
			EndOfStream: eos,
		}},
	})
	if resp == nil {
		return lr
	}
	skipBody, replaced, err := applyHeadersResponse(resp.GetRequestHeaders().GetResponse(), x.req, &x.body)
	if err != nil {
		return x.procError()
	}
	if replaced {
		x.hasBody = len(x.body) > 0
	}
	if eos || skipBody || x.proc.complete {
		return nil
	}
	resp, lr = x.call(requestBody, &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body:        x.body,
			EndOfStream: true,
		}},
	})
	if resp == nil {
		return lr
	}
	if err := applyBodyResponse(resp.GetRequestBody().GetResponse(), x.req, &x.body); err != nil {
		return x.procError()
	}
	return nil
}

// processResponse runs the response phases over resp: response_headers
// (":status" and the headers), then, unless the headers ended the stream,
// response_body with the whole buffered body. It returns resp (mutated)
// or a local reply of ext_proc's own.
func (x *exchange) processResponse(resp *response) (*response, error) {
	h := resp.headers
	h.add(":status", strconv.Itoa(resp.status))
	eos := len(resp.body) == 0
	if resp.stream != nil {
		eos = resp.endOfStream
	}
	defer h.remove(":status")

	r, lr := x.call(responseHeaders, &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers:     protoHeaders(h),
			EndOfStream: eos,
		}},
	})
	if r == nil {
		if lr != nil {
			return lr, nil
		}
		return resp, readUpstreamBody(resp)
	}
	skipBody, replaced, err := applyHeadersResponse(r.GetResponseHeaders().GetResponse(), h, &resp.body)
	if err != nil {
		return x.procError(), nil
	}
	resp.status = statusOf(h, resp.status)
	if replaced && resp.stream != nil {
		// CONTINUE_AND_REPLACE with a body: the upstream body that
		// follows is drained.
		keep := resp.body
		if err := readUpstreamBody(resp); err != nil {
			return nil, err
		}
		resp.body = keep
	}
	if eos || skipBody || x.proc.complete {
		return resp, readUpstreamBody(resp)
	}
	if err := readUpstreamBody(resp); err != nil {
		// Upstream reset after the headers: the processor saw
		// response_headers and nothing more.
		return nil, err
	}
	r, lr = x.call(responseBody, &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body:        resp.body,
			EndOfStream: true,
		}},
	})
	if r == nil {
		if lr != nil {
			return lr, nil
		}
		return resp, nil
	}
	if err := applyBodyResponse(r.GetResponseBody().GetResponse(), h, &resp.body); err != nil {
		return x.procError(), nil
	}
	resp.status = statusOf(h, resp.status)
	return resp, nil
}

func statusOf(h *headerMap, fallback int) int {
	if v, ok := h.first(":status"); ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return fallback
}

// protoHeaders encodes a header map as current Envoy does
// (envoy.reloadable_features.send_header_raw_value): key and raw_value,
// value left empty.
func protoHeaders(h *headerMap) *corev3.HeaderMap {
	out := &corev3.HeaderMap{}
	for _, e := range h.entries {
		out.Headers = append(out.Headers, &corev3.HeaderValue{Key: e.key, RawValue: []byte(e.value)})
	}
	return out
}

var (
	errMutation      = errors.New("egress: header mutation rejected")
	errContentLength = errors.New("egress: mismatch between content length and the length of the mutated body")
)

// applyHeadersResponse applies a HeadersResponse's CommonResponse. It
// reports whether this direction's body phase is skipped, and whether the
// body was replaced: with
// CONTINUE_AND_REPLACE nothing more is sent for the direction, and a
// body_mutation replaces the body (content-length removed). Without
// CONTINUE_AND_REPLACE a body_mutation in a headers answer is ignored.
func applyHeadersResponse(cr *extprocv3.CommonResponse, h *headerMap, body *[]byte) (skip, replaced bool, err error) {
	replacing := cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE
	if m := cr.GetHeaderMutation(); m != nil {
		if err := applyProcMutation(m, h, replacing); err != nil {
			return false, false, err
		}
	}
	if !replacing {
		return false, false, nil
	}
	if bm := cr.GetBodyMutation(); bm != nil {
		h.remove("content-length")
		*body = mutateBody(bm, *body)
		return true, true, nil
	}
	return true, false, nil
}

// applyBodyResponse applies a BodyResponse's CommonResponse in BUFFERED
// mode: the header mutation first (the headers are still held), then the
// body mutation, which Envoy rejects when a content-length header does not
// equal the new body's length.
func applyBodyResponse(cr *extprocv3.CommonResponse, h *headerMap, body *[]byte) error {
	if m := cr.GetHeaderMutation(); m != nil {
		if err := applyProcMutation(m, h, false); err != nil {
			return err
		}
	}
	bm := cr.GetBodyMutation()
	if bm == nil {
		return nil
	}
	if cl, ok := h.first("content-length"); ok {
		if n, err := strconv.ParseUint(cl, 10, 64); err == nil && n != uint64(len(bm.GetBody())) {
			return errContentLength
		}
	}
	*body = mutateBody(bm, *body)
	return nil
}

// mutateBody is MutationUtils::applyBodyMutations: body replaces,
// clear_body empties, anything else leaves the body.
func mutateBody(bm *extprocv3.BodyMutation, body []byte) []byte {
	switch m := bm.GetMutation().(type) {
	case *extprocv3.BodyMutation_Body:
		return m.Body
	case *extprocv3.BodyMutation_ClearBody:
		if m.ClearBody {
			return nil
		}
	}
	return body
}

// applyProcMutation is MutationUtils::applyHeaderMutations with the
// default HeaderMutationRules.
//
//   - The value is read from raw_value only (send_header_raw_value); a
//     HeaderValue with both value and raw_value is an error. A header sent
//     in value alone is therefore set to "".
//   - Only the deprecated append bool is honoured, default false
//     (overwrite): ext_proc ignores append_action (envoyproxy/envoy#36982).
//   - Attempts to set or remove host, :authority, :scheme, :method (unless
//     CONTINUE_AND_REPLACE) and any x-envoy header are ignored, as are
//     removals of pseudo-headers and a :status that is not 200–999.
//   - An invalid header name or value is an error.
func applyProcMutation(m *extprocv3.HeaderMutation, h *headerMap, replacing bool) error {
	for _, k := range m.GetRemoveHeaders() {
		if !validHeaderName(k) {
			return errMutation
		}
		k = strings.ToLower(k)
		if isPseudo(k) || k == "host" || !procMayMutate(k, "", replacing) {
			continue
		}
		h.remove(k)
	}
	for _, o := range m.GetSetHeaders() {
		hv := o.GetHeader()
		if hv == nil {
			continue
		}
		if hv.GetValue() != "" && len(hv.GetRawValue()) > 0 {
			return errMutation
		}
		v := string(hv.GetRawValue())
		if !validHeaderName(hv.GetKey()) || !validHeaderValue(v) {
			return errMutation
		}
		k := strings.ToLower(hv.GetKey())
		if !procMayMutate(k, v, replacing) {
			continue
		}
		appendMode := o.GetAppend().GetValue() //nolint:staticcheck // ext_proc honours only the deprecated field
		if appendMode && isPseudo(k) && h.has(k) {
			continue // a system header takes one value
		}
		if appendMode {
			h.add(k, v)
		} else {
			h.set(k, v)
		}
	}
	return nil
}

func procMayMutate(k, v string, replacing bool) bool {
	switch {
	case k == ":status":
		n, err := strconv.Atoi(v)
		return err == nil && n >= 200 && n <= 999
	case k == "host", k == ":authority", k == ":scheme":
		return false
	case k == ":method":
		return replacing
	case strings.HasPrefix(k, "x-envoy"):
		return false
	}
	return true
}
