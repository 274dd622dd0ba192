// Package extauthz speaks Envoy's ext_authz gRPC protocol
// (envoy.service.auth.v3.Authorization). The conversions between Envoy's
// messages and the engine's are pure functions; Server is the thin edge.
package extauthz

import (
	"encoding/base64"
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/countersign/countersign/internal/engine"
)

// PartialBodyHeader is set by Envoy when with_request_body's bound cut the
// body (allow_partial_message: true).
const PartialBodyHeader = "x-envoy-auth-partial-body"

// Headers that carry the agent's own credential; they never reach the engine's
// header map and are removed from the request on ALLOW.
var credentialHeaders = []string{"authorization", "proxy-authorization", "x-api-key"}

// FromCheckRequest converts an Envoy CheckRequest into an engine Request. It
// never fails: whatever is missing stays empty, and the engine denies.
func FromCheckRequest(req *authv3.CheckRequest) engine.Request {
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
	out.BodyTruncated = strings.EqualFold(out.Headers[PartialBodyHeader], "true")
	out.Credential = credentialFrom(out.Headers)
	for _, k := range credentialHeaders {
		delete(out.Headers, k)
	}
	return out
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
		return &authv3.CheckResponse{
			Status: &status.Status{Code: int32(codes.OK)},
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
				HeadersToRemove: credentialHeaders,
			}},
		}
	}
	code := out.HTTPStatus
	if code == 0 {
		code = http.StatusForbidden
	}
	return &authv3.CheckResponse{
		Status: &status.Status{Code: int32(codes.PermissionDenied), Message: out.ReasonCode + ": " + out.Reason},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(code)},
			Headers: []*corev3.HeaderValueOption{
				header("content-type", "application/json"),
				header("x-countersign-verdict", string(out.Verdict)),
				header("x-countersign-reason", out.ReasonCode),
			},
			Body: string(out.Body),
		}},
	}
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}
