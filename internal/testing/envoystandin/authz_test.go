package envoystandin

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCheckRequestAttributes(t *testing.T) {
	cases := []struct {
		name  string
		opts  []harnessOpt
		req   agentReq
		check func(t *testing.T, h *harness, hr *authv3.AttributeContext_HttpRequest)
	}{
		{
			name: "host is the agent's authority, before the route's host rewrite",
			req:  agentReq{body: "amount=100"},
			check: func(t *testing.T, h *harness, hr *authv3.AttributeContext_HttpRequest) {
				if hr.GetHost() != agentHost || hr.GetHeaders()[":authority"] != agentHost {
					t.Errorf("host = %q, :authority = %q, want %q", hr.GetHost(), hr.GetHeaders()[":authority"], agentHost)
				}
				if got := h.railSaw().host; got != railHost {
					t.Errorf("rail saw Host %q, want %q", got, railHost)
				}
			},
		},
		{
			name: "context extensions come from the route",
			req:  agentReq{body: "amount=100"},
			check: func(t *testing.T, h *harness, _ *authv3.AttributeContext_HttpRequest) {
				ext := h.check().GetAttributes().GetContextExtensions()
				if ext["rail_account"] != "acct_test" || ext["rail_host"] != railHost || len(ext) != 2 {
					t.Errorf("context_extensions = %v", ext)
				}
			},
		},
		{
			name: "header keys are lower-case and repeated headers are joined with a comma",
			req:  agentReq{body: "amount=100", header: http.Header{"X-Custom-Thing": {"a", "b"}, "Stripe-Version": {"2024-06-20"}}},
			check: func(t *testing.T, _ *harness, hr *authv3.AttributeContext_HttpRequest) {
				hs := hr.GetHeaders()
				for k := range hs {
					if k != strings.ToLower(k) {
						t.Errorf("header key %q is not lower-case", k)
					}
				}
				if hs["x-custom-thing"] != "a,b" || hs["stripe-version"] != "2024-06-20" {
					t.Errorf("headers = %v", hs)
				}
				if hs[":method"] != "POST" || hs[":path"] != "/v1/refunds" || hs[":scheme"] != "http" {
					t.Errorf("pseudo-headers = %q %q %q", hs[":method"], hs[":path"], hs[":scheme"])
				}
				if hs["authorization"] != "Bearer cs_agent_credential" {
					t.Errorf("authorization = %q, want the agent's credential as sent", hs["authorization"])
				}
			},
		},
		{
			name: "hop-by-hop headers are not passed on; x-forwarded-proto is added",
			req:  agentReq{body: "amount=100", header: http.Header{"Connection": {"X-Hop"}, "X-Hop": {"1"}}},
			check: func(t *testing.T, _ *harness, hr *authv3.AttributeContext_HttpRequest) {
				hs := hr.GetHeaders()
				if _, ok := hs["x-hop"]; ok {
					t.Error("x-hop, named by Connection, reached ext_authz")
				}
				if _, ok := hs["connection"]; ok {
					t.Error("connection reached ext_authz")
				}
				if hs["x-forwarded-proto"] != "http" {
					t.Errorf("x-forwarded-proto = %q", hs["x-forwarded-proto"])
				}
			},
		},
		{
			name: "path keeps the query as sent",
			req:  agentReq{method: http.MethodGet, path: "/v1/refunds?payment_intent=pi_1&limit=100&expand[]=data.charge"},
			check: func(t *testing.T, h *harness, hr *authv3.AttributeContext_HttpRequest) {
				want := "/v1/refunds?payment_intent=pi_1&limit=100&expand[]=data.charge"
				if hr.GetPath() != want || hr.GetHeaders()[":path"] != want {
					t.Errorf("path = %q, :path = %q, want %q", hr.GetPath(), hr.GetHeaders()[":path"], want)
				}
				if got := h.railSaw().uri; got != want {
					t.Errorf("rail saw %q, want %q", got, want)
				}
			},
		},
		{
			name: "id is the stream id; x-request-id is generated, in the headers and on the request",
			req:  agentReq{body: "amount=100"},
			check: func(t *testing.T, h *harness, hr *authv3.AttributeContext_HttpRequest) {
				if _, err := strconv.ParseUint(hr.GetId(), 10, 64); err != nil {
					t.Errorf("id %q is not a stream id: %v", hr.GetId(), err)
				}
				rid := hr.GetHeaders()["x-request-id"]
				if len(rid) != 36 || strings.Count(rid, "-") != 4 {
					t.Errorf("x-request-id = %q, want a generated UUID", rid)
				}
				if got := h.railSaw().header.Get("X-Request-Id"); got != rid {
					t.Errorf("rail saw x-request-id %q, want %q", got, rid)
				}
			},
		},
		{
			name: "the agent's x-request-id is kept",
			req:  agentReq{body: "amount=100", header: http.Header{"X-Request-Id": {"req-agent-1"}}},
			check: func(t *testing.T, h *harness, hr *authv3.AttributeContext_HttpRequest) {
				if got := hr.GetHeaders()["x-request-id"]; got != "req-agent-1" {
					t.Errorf("x-request-id = %q", got)
				}
				if got := h.railSaw().header.Get("X-Request-Id"); got != "req-agent-1" {
					t.Errorf("rail saw x-request-id %q", got)
				}
			},
		},
		{
			name: "body as a UTF-8 string, with its size and x-envoy-auth-partial-body: false",
			req:  agentReq{body: "amount=100&payment_intent=pi_1"},
			check: func(t *testing.T, _ *harness, hr *authv3.AttributeContext_HttpRequest) {
				if hr.GetBody() != "amount=100&payment_intent=pi_1" || len(hr.GetRawBody()) != 0 {
					t.Errorf("body = %q, raw_body = %q", hr.GetBody(), hr.GetRawBody())
				}
				if hr.GetSize() != int64(len("amount=100&payment_intent=pi_1")) {
					t.Errorf("size = %d", hr.GetSize())
				}
				if got := hr.GetHeaders()[PartialBodyHeader]; got != "false" {
					t.Errorf("%s = %q, want false", PartialBodyHeader, got)
				}
			},
		},
		{
			name: "invalid UTF-8 in the body becomes '!'",
			req:  agentReq{body: "a\xffb\xfe"},
			check: func(t *testing.T, _ *harness, hr *authv3.AttributeContext_HttpRequest) {
				if hr.GetBody() != "a!b!" {
					t.Errorf("body = %q, want %q", hr.GetBody(), "a!b!")
				}
			},
		},
		{
			name: "pack_as_bytes sends the bytes in raw_body",
			opts: []harnessOpt{func(c *Config) { c.PackAsBytes = true }},
			req:  agentReq{body: "a\xffb"},
			check: func(t *testing.T, _ *harness, hr *authv3.AttributeContext_HttpRequest) {
				if string(hr.GetRawBody()) != "a\xffb" || hr.GetBody() != "" {
					t.Errorf("raw_body = %q, body = %q", hr.GetRawBody(), hr.GetBody())
				}
			},
		},
		{
			name: "a request without a body has no body, no partial header and size 0",
			req:  agentReq{method: http.MethodGet, path: "/v1/refunds/re_1"},
			check: func(t *testing.T, _ *harness, hr *authv3.AttributeContext_HttpRequest) {
				if _, ok := hr.GetHeaders()[PartialBodyHeader]; ok || hr.GetBody() != "" || hr.GetSize() != 0 {
					t.Errorf("partial header present=%v, body=%q, size=%d", ok, hr.GetBody(), hr.GetSize())
				}
			},
		},
		{
			name: "without with_request_body no body is sent",
			opts: []harnessOpt{func(c *Config) { c.MaxRequestBytes = 0 }},
			req:  agentReq{body: "amount=100"},
			check: func(t *testing.T, h *harness, hr *authv3.AttributeContext_HttpRequest) {
				if _, ok := hr.GetHeaders()[PartialBodyHeader]; ok || hr.GetBody() != "" || hr.GetSize() != 0 {
					t.Errorf("partial header present=%v, body=%q, size=%d", ok, hr.GetBody(), hr.GetSize())
				}
				if h.railSaw().body != "amount=100" {
					t.Error("the body did not reach the rail")
				}
			},
		},
		{
			name: "the agent's own x-envoy-auth-partial-body is not passed on",
			req:  agentReq{body: "amount=100", header: http.Header{"X-Envoy-Auth-Partial-Body": {"true"}}},
			check: func(t *testing.T, _ *harness, hr *authv3.AttributeContext_HttpRequest) {
				if got := hr.GetHeaders()[PartialBodyHeader]; got != "false" {
					t.Errorf("%s = %q, want Envoy's false", PartialBodyHeader, got)
				}
			},
		},
		{
			name: "method, scheme, protocol, time, source and destination",
			req:  agentReq{body: "amount=100"},
			check: func(t *testing.T, h *harness, hr *authv3.AttributeContext_HttpRequest) {
				attrs := h.check().GetAttributes()
				if hr.GetMethod() != "POST" || hr.GetScheme() != "http" || hr.GetProtocol() != "HTTP/1.1" {
					t.Errorf("method %q scheme %q protocol %q", hr.GetMethod(), hr.GetScheme(), hr.GetProtocol())
				}
				if ts := attrs.GetRequest().GetTime().AsTime(); time.Since(ts) > time.Minute || time.Since(ts) < 0 {
					t.Errorf("request time = %v", ts)
				}
				src := attrs.GetSource().GetAddress().GetSocketAddress()
				if src.GetAddress() != "127.0.0.1" || src.GetPortValue() == 0 {
					t.Errorf("source = %v", src)
				}
				_, port, _ := net.SplitHostPort(h.proxy.Addr())
				dst := attrs.GetDestination().GetAddress().GetSocketAddress()
				if strconv.Itoa(int(dst.GetPortValue())) != port {
					t.Errorf("destination = %v, want port %s", dst, port)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, append([]harnessOpt{withoutProc}, tc.opts...)...)
			resp := h.mustDo(tc.req)
			if resp.status != http.StatusOK {
				t.Fatalf("status %d, body %q", resp.status, resp.body)
			}
			tc.check(t, h, h.check().GetAttributes().GetRequest().GetHttp())
		})
	}
}

func TestWithRequestBody(t *testing.T) {
	const bound = 16
	body := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name        string
		partial     bool
		chunked     bool
		body        string
		wantStatus  int
		wantChecked string // the body ext_authz sees; "" means no check
		wantPartial string
	}{
		{name: "under the bound: whole body, partial false", partial: true, body: body(bound - 1), wantStatus: 200, wantChecked: body(bound - 1), wantPartial: "false"},
		{name: "at the bound: whole body, partial false", partial: true, body: body(bound), wantStatus: 200, wantChecked: body(bound), wantPartial: "false"},
		{name: "one byte over with allow_partial_message: first max_request_bytes, partial true", partial: true, body: body(bound) + "Y", wantStatus: 200, wantChecked: body(bound), wantPartial: "true"},
		{name: "chunked and over with allow_partial_message: first max_request_bytes, partial true", partial: true, chunked: true, body: body(bound) + "YZ", wantStatus: 200, wantChecked: body(bound), wantPartial: "true"},
		{name: "at the bound without allow_partial_message: checked", partial: false, body: body(bound), wantStatus: 200, wantChecked: body(bound), wantPartial: "false"},
		{name: "one byte over without allow_partial_message: 413, never checked or forwarded", partial: false, body: body(bound) + "Y", wantStatus: 413},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, withoutProc, func(c *Config) {
				c.MaxRequestBytes = bound
				c.AllowPartialMessage = tc.partial
			})
			resp := h.mustDo(agentReq{body: tc.body, chunked: tc.chunked})
			if resp.status != tc.wantStatus {
				t.Fatalf("status %d, want %d (body %q)", resp.status, tc.wantStatus, resp.body)
			}
			if tc.wantChecked == "" {
				if n := len(h.authz.requests()); n != 0 {
					t.Errorf("ext_authz was called %d times", n)
				}
				h.railUntouched()
				return
			}
			hr := h.check().GetAttributes().GetRequest().GetHttp()
			if hr.GetBody() != tc.wantChecked {
				t.Errorf("checked body %q, want %q", hr.GetBody(), tc.wantChecked)
			}
			if got := hr.GetHeaders()[PartialBodyHeader]; got != tc.wantPartial {
				t.Errorf("%s = %q, want %q", PartialBodyHeader, got, tc.wantPartial)
			}
			if hr.GetSize() != int64(len(tc.body)) {
				t.Errorf("size = %d, want %d", hr.GetSize(), len(tc.body))
			}
			// The whole body goes upstream after an allow.
			if got := h.railSaw().body; got != tc.body {
				t.Errorf("rail saw body %q, want %q", got, tc.body)
			}
		})
	}
}

func TestDeniedResponse(t *testing.T) {
	refusal := `{"error":{"type":"countersign_refusal","code":"exceeds_refundable","message":"250000 exceeds the 189900 still refundable on pay_1002"}}`
	cases := []struct {
		name       string
		answer     *authv3.CheckResponse
		wantStatus int
		wantBody   string
		wantHeader http.Header
	}{
		{
			name: "status, headers and body of denied_response reach the agent",
			answer: denied(typev3.StatusCode_PaymentRequired, refusal,
				hvo("content-type", "application/json", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
				hvo("x-countersign-verdict", "BLOCK", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)),
			wantStatus: 402,
			wantBody:   refusal,
			wantHeader: http.Header{"Content-Type": {"application/json"}, "X-Countersign-Verdict": {"BLOCK"}},
		},
		{
			name:       "a denial without denied_response is 403 with an empty body",
			answer:     &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)}},
			wantStatus: 403,
			wantBody:   "",
		},
		{
			name: "a denied_response without status is 403 with its body as text/plain",
			answer: &authv3.CheckResponse{
				Status:       &rpcstatus.Status{Code: int32(codes.PermissionDenied)},
				HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Body: "held"}},
			},
			wantStatus: 403,
			wantBody:   "held",
			wantHeader: http.Header{"Content-Type": {"text/plain"}},
		},
		{
			name:       "any non-OK status is a denial",
			answer:     &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.Unauthenticated)}, HttpResponse: denied(typev3.StatusCode_Unauthorized, "who?").GetHttpResponse()},
			wantStatus: 401,
			wantBody:   "who?",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, withoutProc)
			h.authz.answer = func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) { return tc.answer, nil }
			resp := h.mustDo(agentReq{body: "amount=250000"})
			if resp.status != tc.wantStatus || resp.body != tc.wantBody {
				t.Errorf("got %d %q, want %d %q", resp.status, resp.body, tc.wantStatus, tc.wantBody)
			}
			for k, want := range tc.wantHeader {
				if got := resp.header.Values(k); !slices.Equal(got, want) {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			h.railUntouched()
		})
	}
}

func TestFailClosed(t *testing.T) {
	okNoHTTP := &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.OK)}}
	cases := []struct {
		name       string
		opts       []harnessOpt
		answer     func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error)
		wantStatus int
		wantBody   string
		// forwarded: the rail is called, with the agent's credential
		// untouched (no mutation was applied).
		forwarded bool
	}{
		{
			name:       "ext_authz unreachable: 503, never forwarded",
			opts:       []harnessOpt{func(c *Config) { c.ExtAuthz = deadAddr(t) }},
			wantStatus: 503,
		},
		{
			name: "ext_authz slower than the grpc timeout: 503, never forwarded",
			opts: []harnessOpt{func(c *Config) { c.Timeout = 100 * time.Millisecond }},
			answer: func(ctx context.Context, _ *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			wantStatus: 503,
		},
		{
			name: "ext_authz gRPC error: 503, never forwarded",
			answer: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return nil, status.Error(codes.Internal, "ledger down")
			},
			wantStatus: 503,
		},
		{
			name: "status_on_error sets the reply's status",
			opts: []harnessOpt{func(c *Config) { c.StatusOnError = 500 }},
			answer: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return nil, status.Error(codes.Unavailable, "down")
			},
			wantStatus: 500,
		},
		{
			name: "error_response is an error with its own status and body",
			answer: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return &authv3.CheckResponse{
					Status: &rpcstatus.Status{Code: int32(codes.Unavailable)},
					HttpResponse: &authv3.CheckResponse_ErrorResponse{ErrorResponse: &authv3.DeniedHttpResponse{
						Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadGateway}, Body: "ledger unreachable",
					}},
				}, nil
			},
			wantStatus: 502,
			wantBody:   "ledger unreachable",
		},
		{
			name: "failure_mode_allow forwards on error, untouched (completeness only)",
			opts: []harnessOpt{func(c *Config) { c.FailureModeAllow = true }},
			answer: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return nil, status.Error(codes.Internal, "down")
			},
			wantStatus: 200,
			forwarded:  true,
		},
		{
			name:       "OK without http_response is an allow with no mutations",
			answer:     func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) { return okNoHTTP, nil },
			wantStatus: 200,
			forwarded:  true,
		},
		{
			name: "a response without a status is code 0, an allow",
			answer: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return &authv3.CheckResponse{}, nil
			},
			wantStatus: 200,
			forwarded:  true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, append([]harnessOpt{withoutProc}, tc.opts...)...)
			if tc.answer != nil {
				h.authz.answer = tc.answer
			}
			resp := h.mustDo(agentReq{body: "amount=100", header: http.Header{"X-Api-Key": {"cs_agent"}}})
			if resp.status != tc.wantStatus || (!tc.forwarded && resp.body != tc.wantBody) {
				t.Fatalf("got %d %q, want %d %q", resp.status, resp.body, tc.wantStatus, tc.wantBody)
			}
			if !tc.forwarded {
				h.railUntouched()
				return
			}
			got := h.railSaw()
			if got.header.Get("Authorization") != "Bearer cs_agent_credential" || got.header.Get("X-Api-Key") != "cs_agent" {
				t.Errorf("rail saw authorization %q, x-api-key %q: a mutation was applied",
					got.header.Get("Authorization"), got.header.Get("X-Api-Key"))
			}
		})
	}
}

func TestAllowHeaderMutations(t *testing.T) {
	const (
		appendOrAdd     = corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
		addIfAbsent     = corev3.HeaderValueOption_ADD_IF_ABSENT
		overwriteOrAdd  = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		overwriteExists = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS
	)
	cases := []struct {
		name   string
		legacy bool
		path   string
		agent  http.Header
		ok     *authv3.OkHttpResponse
		check  func(t *testing.T, rail upstreamRecord, agent agentResp)
	}{
		{
			name: "OVERWRITE_IF_EXISTS_OR_ADD replaces the agent's credential",
			ok:   &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hvo("Authorization", "Bearer sk_rail", overwriteOrAdd)}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "Authorization", "Bearer sk_rail")
			},
		},
		{
			name: "OVERWRITE_IF_EXISTS_OR_ADD adds an absent header",
			ok:   &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hvo("idempotency-key", "cs_SIK1_1", overwriteOrAdd)}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "Idempotency-Key", "cs_SIK1_1")
			},
		},
		{
			name:  "ADD_IF_ABSENT leaves a present header",
			agent: http.Header{"Idempotency-Key": {"sdk-random"}},
			ok:    &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hvo("idempotency-key", "cs_SIK1_1", addIfAbsent)}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "Idempotency-Key", "sdk-random")
			},
		},
		{
			name: "ADD_IF_ABSENT adds an absent header",
			ok:   &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hvo("idempotency-key", "cs_SIK1_1", addIfAbsent)}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "Idempotency-Key", "cs_SIK1_1")
			},
		},
		{
			name:  "APPEND_IF_EXISTS_OR_ADD adds a second entry",
			agent: http.Header{"X-Tag": {"a"}},
			ok:    &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hvo("x-tag", "b", appendOrAdd)}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "X-Tag", "a", "b")
			},
		},
		{
			name: "APPEND_IF_EXISTS_OR_ADD adds an absent header",
			ok:   &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hvo("x-tag", "b", appendOrAdd)}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "X-Tag", "b")
			},
		},
		{
			name:  "append_action left unset is APPEND_IF_EXISTS_OR_ADD, not an overwrite",
			agent: http.Header{"X-Tag": {"a"}},
			ok:    &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-tag", Value: "b"}}}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "X-Tag", "a", "b")
			},
		},
		{
			name:  "OVERWRITE_IF_EXISTS replaces a present header",
			agent: http.Header{"X-Tag": {"a"}},
			ok:    &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hvo("x-tag", "b", overwriteExists)}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "X-Tag", "b")
			},
		},
		{
			name: "OVERWRITE_IF_EXISTS does not add an absent header",
			ok:   &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hvo("x-tag", "b", overwriteExists)}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "X-Tag")
			},
		},
		{
			name:  "deprecated append true joins the existing value with a comma",
			agent: http.Header{"X-Tag": {"a"}},
			ok:    &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hvoAppend("x-tag", "b", true)}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "X-Tag", "a,b")
			},
		},
		{
			name:  "deprecated append false overwrites, whatever append_action says",
			agent: http.Header{"X-Tag": {"a"}},
			ok: &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{{
				Header: &corev3.HeaderValue{Key: "x-tag", Value: "b"}, Append: hvoAppend("", "", false).Append, AppendAction: appendOrAdd, //nolint:staticcheck // the deprecated field is under test
			}}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "X-Tag", "b")
			},
		},
		{
			name:  "headers_to_remove removes; host and pseudo-headers cannot be removed",
			agent: http.Header{"X-Api-Key": {"cs_agent"}},
			ok:    &authv3.OkHttpResponse{HeadersToRemove: []string{"X-Api-Key", "host", ":authority", ":path"}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "X-Api-Key")
				if r.host != railHost || r.uri != "/v1/refunds" {
					t.Errorf("rail saw host %q uri %q", r.host, r.uri)
				}
			},
		},
		{
			name: "ext_authz reads value; raw_value is ignored",
			ok:   &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-stamp", RawValue: []byte("raw")}, AppendAction: overwriteOrAdd}}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "X-Stamp", "")
			},
		},
		{
			name:   "legacy Envoy ignores append_action: APPEND_IF_EXISTS_OR_ADD overwrites",
			legacy: true,
			agent:  http.Header{"X-Tag": {"a"}},
			ok:     &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hvo("x-tag", "b", appendOrAdd)}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "X-Tag", "b")
			},
		},
		{
			name:   "legacy Envoy appends with append true only to a present header",
			legacy: true,
			ok:     &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{hvoAppend("x-tag", "b", true)}},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				wantValues(t, r.header, "X-Tag")
			},
		},
		{
			name: "response_headers_to_add reaches the agent, not the rail",
			ok:   &authv3.OkHttpResponse{ResponseHeadersToAdd: []*corev3.HeaderValueOption{hvo("x-countersign-intent", "SIK1", overwriteOrAdd)}},
			check: func(t *testing.T, r upstreamRecord, a agentResp) {
				wantValues(t, a.header, "X-Countersign-Intent", "SIK1")
				wantValues(t, r.header, "X-Countersign-Intent")
			},
		},
		{
			name: "query_parameters_to_set and _to_remove rebuild the query in key order",
			path: "/v1/refunds?b=2&a=1&drop=x",
			ok: &authv3.OkHttpResponse{
				QueryParametersToSet:    []*corev3.QueryParameter{{Key: "c", Value: "3"}, {Key: "b", Value: "9"}},
				QueryParametersToRemove: []string{"drop"},
			},
			check: func(t *testing.T, r upstreamRecord, _ agentResp) {
				if r.uri != "/v1/refunds?a=1&b=9&c=3" {
					t.Errorf("rail saw %q", r.uri)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, withoutProc, func(c *Config) { c.LegacyAppend = tc.legacy })
			h.authz.answer = func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return &authv3.CheckResponse{
					Status:       &rpcstatus.Status{Code: int32(codes.OK)},
					HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: tc.ok},
				}, nil
			}
			resp := h.mustDo(agentReq{path: tc.path, body: "amount=100", header: tc.agent})
			if resp.status != http.StatusOK {
				t.Fatalf("status %d %q", resp.status, resp.body)
			}
			tc.check(t, h.railSaw(), resp)
		})
	}
}

// wantValues checks every value of header k, in order; none means absent.
func wantValues(t *testing.T, h http.Header, k string, want ...string) {
	t.Helper()
	if got := h.Values(k); !slices.Equal(got, want) {
		t.Errorf("%s = %q, want %q", k, got, want)
	}
}
