package envoystandin

import (
	"context"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// PartialBodyHeader is the header Envoy adds to the check's headers when
// with_request_body is on: "true" when the body was cut at
// max_request_bytes, "false" when it is whole.
const PartialBodyHeader = "x-envoy-auth-partial-body"

// MetadataNamespace is where Envoy files ext_authz's dynamic metadata.
const MetadataNamespace = "envoy.filters.http.ext_authz"

// extAuthz is the ext_authz HTTP filter (envoy.filters.http.ext_authz),
// gRPC service, transport_api_version V3. nil means the request continues.
func (x *exchange) extAuthz() *response {
	cfg := x.p.cfg
	// with_request_body: Envoy buffers the body before calling, unless the
	// headers ended the stream. Without allow_partial_message the decoder
	// buffer limit is max_request_bytes, and a larger body makes the
	// connection manager answer 413 before any check is made.
	buffered := cfg.MaxRequestBytes > 0 && x.hasBody
	sent, partial := x.body, false
	if buffered && uint64(len(x.body)) > uint64(cfg.MaxRequestBytes) {
		if !cfg.AllowPartialMessage {
			return localReply(http.StatusRequestEntityTooLarge, []byte("Payload Too Large"), nil)
		}
		// allow_partial_message: the check carries the first
		// max_request_bytes bytes and x-envoy-auth-partial-body: true.
		sent, partial = x.body[:cfg.MaxRequestBytes], true
	}
	req := x.checkRequest(buffered, sent, partial)

	// grpc_service.timeout bounds the call.
	ctx, cancel := context.WithTimeout(x.ctx, cfg.Timeout)
	start := time.Now()
	resp, err := x.p.authz.Check(ctx, req)
	elapsed := time.Since(start)
	cancel()
	if err != nil {
		// A gRPC error, a timeout or an unreachable service is
		// CheckStatus::Error.
		return x.authzError(nil)
	}

	ok := resp.GetStatus().GetCode() == int32(codes.OK)
	x.keepMetadata(resp, ok, elapsed)
	switch {
	case ok:
		// Status OK allows, with or without an ok_response; an absent
		// status is code 0, which is OK too.
		x.authzAllow(resp.GetOkResponse())
		return nil
	case resp.GetErrorResponse() != nil:
		// error_response makes a non-OK status an error, not a denial.
		return x.authzError(resp.GetErrorResponse())
	default:
		return x.authzDenied(resp.GetDeniedResponse())
	}
}

// checkRequest builds the CheckRequest as Envoy's
// CheckRequestUtils::createHttpCheck does, from the request headers as
// they stand before the router (so host is the agent's :authority, not the
// route's host_rewrite_literal).
func (x *exchange) checkRequest(buffered bool, sent []byte, partial bool) *authv3.CheckRequest {
	headers := map[string]string{}
	for _, e := range x.req.entries {
		// A client's own x-envoy-auth-partial-body is dropped: the header
		// is Envoy's.
		if e.key == PartialBodyHeader {
			continue
		}
		v := sanitizeUTF8(e.value)
		if prev, dup := headers[e.key]; dup {
			// Duplicate headers are merged with ",".
			headers[e.key] = prev + "," + v
		} else {
			headers[e.key] = v
		}
	}
	get := func(k string) string { v, _ := x.req.first(k); return sanitizeUTF8(v) }
	hr := &authv3.AttributeContext_HttpRequest{
		// id is the stream id (a random uint64), not x-request-id: Envoy
		// sets httpreq.set_id(std::to_string(stream_id)). x-request-id is
		// in the headers.
		Id:       strconv.FormatUint(x.streamID, 10),
		Method:   get(":method"),
		Headers:  headers,
		Path:     get(":path"), // path and query, as sent
		Host:     get(":authority"),
		Scheme:   get(":scheme"),
		Protocol: x.proto,
	}
	if buffered {
		// size is bytesReceived when the check starts: the buffered body.
		// Without with_request_body the check starts at the headers, so 0.
		hr.Size = int64(len(x.body))
		if x.p.cfg.PackAsBytes {
			hr.RawBody = slices.Clone(sent)
		} else {
			hr.Body = sanitizeUTF8(string(sent))
		}
		headers[PartialBodyHeader] = strconv.FormatBool(partial)
	}
	source := &authv3.AttributeContext_Peer{Address: socketAddress(x.remote)}
	if svc, ok := x.req.first("x-envoy-downstream-service-cluster"); ok {
		source.Service = sanitizeUTF8(svc)
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      source,
		Destination: &authv3.AttributeContext_Peer{Address: socketAddress(x.local)},
		Request: &authv3.AttributeContext_Request{
			Time: timestamppb.New(x.start),
			Http: hr,
		},
		// ExtAuthzPerRoute check_settings.context_extensions of the route.
		ContextExtensions:    maps.Clone(x.route.ContextExtensions),
		MetadataContext:      &corev3.Metadata{},
		RouteMetadataContext: &corev3.Metadata{},
	}}
}

func socketAddress(hostport string) *corev3.Address {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	n, _ := strconv.ParseUint(port, 10, 32)
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(n)},
	}}}
}

// keepMetadata files the response's dynamic metadata under
// envoy.filters.http.ext_authz, whatever the verdict, when it has fields.
// The deprecated OkHttpResponse.dynamic_metadata overrides
// CheckResponse.dynamic_metadata; on OK Envoy adds ext_authz_duration
// (milliseconds).
func (x *exchange) keepMetadata(resp *authv3.CheckResponse, ok bool, elapsed time.Duration) {
	md := resp.GetDynamicMetadata()
	if okr := resp.GetOkResponse(); okr.GetDynamicMetadata() != nil { //nolint:staticcheck // the deprecated field is part of the contract
		md = okr.GetDynamicMetadata() //nolint:staticcheck // as above
	}
	if len(md.GetFields()) == 0 {
		return
	}
	md = proto.Clone(md).(*structpb.Struct)
	if ok {
		md.Fields["ext_authz_duration"] = structpb.NewNumberValue(float64(elapsed.Milliseconds()))
	}
	x.metadata = md
}

// authzAllow applies an OkHttpResponse: headers (by append action), then
// headers_to_remove, then the query parameter changes; it keeps
// response_headers_to_add for the encoder path.
func (x *exchange) authzAllow(ok *authv3.OkHttpResponse) {
	x.authzOK = true
	if ok == nil {
		return
	}
	applyAuthzHeaders(ok.GetHeaders(), x.req, x.p.cfg.LegacyAppend, false)
	for _, k := range ok.GetHeadersToRemove() {
		k = strings.ToLower(k)
		// Pseudo-headers and host are never removable
		// (HeaderUtility::isRemovableHeader).
		if isPseudo(k) || k == "host" {
			continue
		}
		x.req.remove(k)
	}
	if len(ok.GetQueryParametersToSet()) > 0 || len(ok.GetQueryParametersToRemove()) > 0 {
		path, _ := x.req.first(":path")
		x.req.set(":path", mutateQuery(path, ok.GetQueryParametersToSet(), ok.GetQueryParametersToRemove()))
	}
	x.respHeaders = ok.GetResponseHeadersToAdd()
}

// authzDenied sends the DeniedHttpResponse as a local reply: its status
// (403 when unset), its body, and its headers, each of which first removes
// any header of that name from the reply, then is added.
func (x *exchange) authzDenied(d *authv3.DeniedHttpResponse) *response {
	status := http.StatusForbidden
	if c := int(d.GetStatus().GetCode()); c >= 200 && c <= 999 {
		status = c
	}
	return localReply(status, []byte(d.GetBody()), func(h *headerMap) { replyHeaders(h, d.GetHeaders()) })
}

// authzError is CheckStatus::Error: failure_mode_allow continues the
// request untouched; otherwise the reply is status_on_error with an empty
// body, unless the server sent an error_response (its status, headers and
// body).
func (x *exchange) authzError(er *authv3.DeniedHttpResponse) *response {
	if x.p.cfg.FailureModeAllow {
		return nil
	}
	status := x.p.cfg.StatusOnError
	if c := int(er.GetStatus().GetCode()); c >= 200 && c <= 999 {
		status = c
	}
	return localReply(status, []byte(er.GetBody()), func(h *headerMap) { replyHeaders(h, er.GetHeaders()) })
}

func replyHeaders(h *headerMap, opts []*corev3.HeaderValueOption) {
	for _, o := range opts {
		h.remove(o.GetHeader().GetKey())
	}
	for _, o := range opts {
		if k := o.GetHeader().GetKey(); k != "" {
			h.add(k, o.GetHeader().GetValue())
		}
	}
}

// applyAuthzHeaders applies ext_authz HeaderValueOptions in order. ext_authz
// reads HeaderValue.value (not raw_value) and lower-cases the key.
//
// Current Envoy (envoyproxy/envoy#42878): the deprecated append, when set,
// wins — true appends to the existing entry with "," (appendCopy), false
// overwrites; otherwise append_action: APPEND_IF_EXISTS_OR_ADD adds an
// entry, ADD_IF_ABSENT adds only when absent, OVERWRITE_IF_EXISTS_OR_ADD
// replaces or adds, OVERWRITE_IF_EXISTS replaces only when present. Note
// that append_action's zero value is APPEND_IF_EXISTS_OR_ADD.
//
// legacy (earlier releases): append_action is ignored; append true appends
// to an existing request header only (response headers: adds), anything
// else overwrites.
func applyAuthzHeaders(opts []*corev3.HeaderValueOption, h *headerMap, legacy, response bool) {
	for _, o := range opts {
		k := strings.ToLower(o.GetHeader().GetKey())
		v := o.GetHeader().GetValue()
		if k == "" {
			continue
		}
		appendBool := o.GetAppend() //nolint:staticcheck // the deprecated field is part of the contract
		if legacy {
			switch {
			case !appendBool.GetValue():
				h.set(k, v)
			case response:
				h.add(k, v)
			case h.has(k):
				h.appendCopy(k, v)
			}
			continue
		}
		if appendBool != nil {
			if appendBool.GetValue() {
				h.appendCopy(k, v)
			} else {
				h.set(k, v)
			}
			continue
		}
		switch o.GetAppendAction() {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			h.add(k, v)
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if !h.has(k) {
				h.add(k, v)
			}
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if h.has(k) {
				h.set(k, v)
			}
		default:
			// OVERWRITE_IF_EXISTS_OR_ADD; an unknown action is recorded
			// by Envoy and, without validate_mutations, treated the same.
			h.set(k, v)
		}
	}
}

// mutateQuery applies query_parameters_to_set and _to_remove the way
// Envoy's QueryParamsMulti does: parameters are kept undecoded in a map
// ordered by key, set overwrites every value of a key, and the query is
// rebuilt in key order.
func mutateQuery(path string, set []*corev3.QueryParameter, remove []string) string {
	base, raw, _ := strings.Cut(path, "?")
	params := map[string][]string{}
	for p := range strings.SplitSeq(raw, "&") {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		params[k] = append(params[k], v)
	}
	for _, q := range set {
		params[q.GetKey()] = []string{q.GetValue()}
	}
	for _, k := range remove {
		delete(params, k)
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(params)) {
		for _, v := range params[k] {
			parts = append(parts, k+"="+v)
		}
	}
	if len(parts) == 0 {
		return base
	}
	return base + "?" + strings.Join(parts, "&")
}
