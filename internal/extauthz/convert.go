// Package extauthz speaks Envoy's ext_authz gRPC protocol
// (envoy.service.auth.v3.Authorization). The conversions between Envoy's
// messages and the engine's are pure functions; Server is the thin edge.
package extauthz

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/quota"
)

// VerdictReplay labels an answer replayed from the ledger.
const VerdictReplay = "REPLAY"

// PartialBodyHeader is set by Envoy when with_request_body's bound cut the
// body (allow_partial_message: true).
const PartialBodyHeader = "x-envoy-auth-partial-body"

// Headers that carry the agent's own credential; they never reach the engine's
// header map and are removed from the request on ALLOW.
var credentialHeaders = []string{"authorization", "proxy-authorization", "x-api-key"}

// FromCheckRequest converts an Envoy CheckRequest into an engine Request. It
// never fails: whatever is missing stays empty, and the engine denies.
// maxBody is Envoy's with_request_body.max_request_bytes.
func FromCheckRequest(req *authv3.CheckRequest, maxBody int) engine.Request {
	h := req.GetAttributes().GetRequest().GetHttp()
	out := engine.Request{
		Source:    engine.SourceExtAuthz,
		RequestID: h.GetId(),
		Method:    h.GetMethod(),
		Host:      h.GetHost(),
		Path:      h.GetPath(),
		Headers:   make(map[string]string, len(h.GetHeaders())),
	}
	for k, v := range h.GetHeaders() {
		out.Headers[strings.ToLower(k)] = v
	}
	// Envoy sends the body as raw_body when pack_as_bytes is set, else as body.
	if raw := h.GetRawBody(); len(raw) > 0 {
		out.Body = raw
	} else if h.GetBody() != "" {
		out.Body = []byte(h.GetBody())
	}
	out.BodyTruncated = !BodyIsWhole(out.Headers, len(out.Body), maxBody)
	// Envoy's CheckRequest id is its stream id; x-request-id is the id the
	// agent, the logs and the rail's traces share. Prefer it.
	if rid := out.Headers["x-request-id"]; rid != "" {
		out.RequestID = rid
	}
	// Envoy's per-route check settings name the rail, because the agent
	// talks to Envoy's local address and the Host it sends is Envoy's.
	// The downstream peer as Envoy saw it: the failed-credential quota's
	// source, normalised as every source is (every loopback address one).
	out.Peer = quota.SourceKey(req.GetAttributes().GetSource().GetAddress().GetSocketAddress().GetAddress())
	ext := req.GetAttributes().GetContextExtensions()
	out.RailAccount, out.RailHost = ext["rail_account"], ext["rail_host"]
	out.Credential = credentialFrom(out.Headers)
	for _, k := range credentialHeaders {
		delete(out.Headers, k)
	}
	return out
}

// BodyIsWhole reports whether the body the check carries can be shown to be
// the whole request body. Envoy's own flag is not enough on its own: it
// sets x-envoy-auth-partial-body from "the bytes copied differ from the
// bytes buffered" (check_request_utils.cc, setHttpRequest), so a check
// started when the buffer is exactly full says "false" with more to come,
// and it sets nothing at all when it buffered no body. So:
//   - Envoy said partial: not whole;
//   - a declared Content-Length must be one plain decimal equal to the bytes
//     seen (Envoy drops a client's own partial-body header, ibid., and
//     refuses a request whose Content-Length disagrees with its body);
//   - a body that reached the bound is not whole either, even when its
//     declared length says it is: Envoy starts the check as soon as the
//     buffer is full, before the stream has ended (ext_authz.cc,
//     decodeData: isBufferFull), so over HTTP/2 the agent can hold the end
//     of the stream back after an ALLOW and release the request whenever
//     it likes.
func BodyIsWhole(headers map[string]string, seen, maxBody int) bool {
	if strings.EqualFold(headers[PartialBodyHeader], "true") {
		return false
	}
	if maxBody > 0 && seen >= maxBody {
		return false
	}
	if cl, ok := headers["content-length"]; ok {
		n, err := strconv.ParseUint(cl, 10, 63)
		return err == nil && cl != "" && cl[0] != '+' && n == uint64(seen)
	}
	return true
}

// BodyDigest is the hex SHA-256 that binds a decided body to the one
// ext_proc lets leave.
func BodyDigest(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// credentialFrom extracts the agent credential from where an unmodified rail
// SDK puts its API key: Stripe sends "Authorization: Bearer <key>", Razorpay
// sends HTTP Basic "<key_id>:<key_secret>" — the credential is the secret,
// or the user name when the secret is empty.
func credentialFrom(headers map[string]string) string {
	auth := strings.TrimSpace(headers["authorization"])
	scheme, value, ok := strings.Cut(auth, " ")
	if !ok {
		return ""
	}
	value = strings.TrimSpace(value)
	switch strings.ToLower(scheme) {
	case "bearer":
		return value
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			return ""
		}
		user, pass, _ := strings.Cut(string(raw), ":")
		if pass != "" {
			return pass
		}
		return user
	}
	return ""
}

// ToCheckResponse converts an engine Outcome into Envoy's CheckResponse.
// A deny is a response with PERMISSION_DENIED and the refusal body, never a
// gRPC error (an error would leave the answer to Envoy's failure mode).
func ToCheckResponse(out engine.Outcome) *authv3.CheckResponse {
	if out.Verdict == engine.Allow {
		ok := &authv3.OkHttpResponse{}
		for _, k := range slices.Sorted(maps.Keys(out.SetHeaders)) {
			ok.Headers = append(ok.Headers, header(k, out.SetHeaders[k]))
		}
		// The agent's credential never reaches the rail: authorization is
		// overwritten with the rail key, the other credential headers are
		// removed (a header is never both set and removed).
		for _, k := range credentialHeaders {
			if _, set := out.SetHeaders[k]; !set {
				ok.HeadersToRemove = append(ok.HeadersToRemove, k)
			}
		}
		resp := &authv3.CheckResponse{
			Status:       &status.Status{Code: int32(codes.OK)},
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok},
		}
		if out.Intent != nil {
			resp.DynamicMetadata = IntentMetadata(out.Intent)
		}
		if out.ToolsList != nil {
			resp.DynamicMetadata = ToolsListMetadata(resp.DynamicMetadata, out.ToolsList)
		}
		return resp
	}
	code := out.HTTPStatus
	if code == 0 {
		code = http.StatusForbidden
	}
	// A replayed duplicate is not forwarded (the decision is BLOCK), but it
	// is the rail's own answer, not a refusal: it says REPLAY.
	verdict := string(out.Verdict)
	if out.Replayed {
		verdict = VerdictReplay
	}
	headers := []*corev3.HeaderValueOption{
		header("content-type", "application/json"),
		header("x-countersign-verdict", verdict),
		header("x-countersign-reason", out.ReasonCode),
	}
	for _, k := range slices.Sorted(maps.Keys(out.ResponseHeaders)) {
		if k != "content-type" {
			headers = append(headers, header(k, out.ResponseHeaders[k]))
		}
	}
	return &authv3.CheckResponse{
		Status: &status.Status{Code: int32(codes.PermissionDenied), Message: out.ReasonCode + ": " + out.Reason},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
			Headers: headers,
			Body:    string(out.Body),
		}},
	}
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// MetadataNamespace is where Envoy files ext_authz's dynamic metadata; the
// ext_proc filter is configured to forward it (metadata_options).
const MetadataNamespace = "envoy.filters.http.ext_authz"

// IntentMetadata is the dynamic metadata of an ALLOW: which attempt the
// request is, so the response path can commit it.
func IntentMetadata(r *engine.IntentRef) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"countersign": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"rail_account": structpb.NewStringValue(r.RailAccount),
			"sik":          structpb.NewStringValue(r.SIK),
			"attempt_seq":  structpb.NewStringValue(strconv.Itoa(r.AttemptSeq)),
			"stamp":        structpb.NewStringValue(r.Stamp),
			"body_field":   structpb.NewStringValue(r.BodyField),
			"body_value":   structpb.NewStringValue(r.BodyValue),
			"body_sha256":  structpb.NewStringValue(r.BodySHA256),
			"amount_field": structpb.NewStringValue(r.AmountField),
			"amount":       structpb.NewStringValue(strconv.FormatInt(r.Amount, 10)),
			"call_id":      structpb.NewStringValue(r.CallID),
		}}),
	}}
}

// IntentFromMetadata reads IntentMetadata back (ext_proc receives it under
// MetadataNamespace). ok is false when the metadata is absent or malformed.
func IntentFromMetadata(s *structpb.Struct) (engine.IntentRef, bool) {
	cs := s.GetFields()["countersign"].GetStructValue()
	if cs == nil {
		return engine.IntentRef{}, false
	}
	f := func(k string) string { return cs.GetFields()[k].GetStringValue() }
	seq, err := strconv.Atoi(f("attempt_seq"))
	r := engine.IntentRef{RailAccount: f("rail_account"), SIK: f("sik"), AttemptSeq: seq,
		Stamp: f("stamp"), BodyField: f("body_field"), BodyValue: f("body_value"), BodySHA256: f("body_sha256"), AmountField: f("amount_field"),
		CallID: f("call_id")}
	if r.AmountField != "" {
		// An amount to write that cannot be read is no intent to send.
		amount, aerr := strconv.ParseInt(f("amount"), 10, 64)
		if aerr != nil || amount <= 0 {
			return engine.IntentRef{}, false
		}
		r.Amount = amount
	}
	return r, err == nil && seq > 0 && r.RailAccount != "" && r.SIK != ""
}
