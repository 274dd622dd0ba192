package envoystandin

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const refundBody = "amount=100&payment_intent=pi_1"

func TestExtProcPhases(t *testing.T) {
	cases := []struct {
		name  string
		opts  []harnessOpt
		authz func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error)
		rail  http.HandlerFunc
		req   agentReq
		check func(t *testing.T, h *harness, rec *procRecord)
	}{
		{
			name: "phases in order, ext_authz metadata in every message, protocol_config on the first, half-close at the end",
			req:  agentReq{body: refundBody},
			check: func(t *testing.T, _ *harness, rec *procRecord) {
				want := []string{"request_headers", "request_body", "response_headers", "response_body"}
				if got := rec.phases(); !slices.Equal(got, want) {
					t.Fatalf("phases %v, want %v", got, want)
				}
				for i, q := range rec.reqs {
					md := q.GetMetadataContext().GetFilterMetadata()[MetadataNamespace]
					cs := md.GetFields()["countersign"].GetStructValue().GetFields()
					if cs["sik"].GetStringValue() != "SIK1" || cs["attempt_seq"].GetStringValue() != "1" {
						t.Errorf("%s: metadata %v", phaseName(q), md)
					}
					if _, ok := md.GetFields()["ext_authz_duration"].GetKind().(*structpb.Value_NumberValue); !ok {
						t.Errorf("%s: ext_authz_duration missing", phaseName(q))
					}
					pc := q.GetProtocolConfig()
					if i == 0 && (pc.GetRequestBodyMode() != procmodev3.ProcessingMode_BUFFERED || pc.GetResponseBodyMode() != procmodev3.ProcessingMode_BUFFERED) {
						t.Errorf("first message protocol_config = %v", pc)
					}
					if i > 0 && pc != nil {
						t.Errorf("%s carries protocol_config", phaseName(q))
					}
				}
				if !rec.halfClosed || rec.cancelled {
					t.Errorf("stream halfClosed=%v cancelled=%v, want a half-close", rec.halfClosed, rec.cancelled)
				}
			},
		},
		{
			name: "request_headers: pseudo-headers and the headers after ext_authz, in raw_value",
			req:  agentReq{body: refundBody, header: http.Header{"X-Api-Key": {"cs_agent"}}},
			check: func(t *testing.T, _ *harness, rec *procRecord) {
				rh := rec.reqs[0].GetRequestHeaders()
				hs := headerValues(t, rh.GetHeaders())
				for k, want := range map[string]string{
					":method": "POST", ":path": "/v1/refunds", ":authority": agentHost, ":scheme": "http",
					"authorization": "Bearer sk_rail", "content-length": strconv.Itoa(len(refundBody)),
				} {
					if got := hs[k]; !slices.Equal(got, []string{want}) {
						t.Errorf("%s = %q, want %q", k, got, want)
					}
				}
				if _, ok := hs["x-api-key"]; ok {
					t.Error("x-api-key, removed by ext_authz, reached ext_proc")
				}
				if rh.GetEndOfStream() {
					t.Error("request_headers end_of_stream with a body to come")
				}
			},
		},
		{
			name: "request_body carries the whole body, past max_request_bytes, with end_of_stream",
			req:  agentReq{body: strings.Repeat("b", 100)},
			check: func(t *testing.T, _ *harness, rec *procRecord) {
				rb := rec.reqs[1].GetRequestBody()
				if string(rb.GetBody()) != strings.Repeat("b", 100) || !rb.GetEndOfStream() {
					t.Errorf("request_body %q eos=%v", rb.GetBody(), rb.GetEndOfStream())
				}
			},
		},
		{
			name: "no body: request_headers end the stream and no request_body is sent",
			req:  agentReq{method: http.MethodGet, path: "/v1/refunds/re_1"},
			check: func(t *testing.T, _ *harness, rec *procRecord) {
				want := []string{"request_headers", "response_headers", "response_body"}
				if got := rec.phases(); !slices.Equal(got, want) {
					t.Fatalf("phases %v, want %v", got, want)
				}
				if !rec.reqs[0].GetRequestHeaders().GetEndOfStream() {
					t.Error("request_headers without end_of_stream")
				}
			},
		},
		{
			name: "response_headers carry :status and the rail's headers; response_body the whole body",
			rail: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Request-Id", "req_rail")
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"id":"re_9"}`))
			},
			req: agentReq{body: refundBody},
			check: func(t *testing.T, _ *harness, rec *procRecord) {
				rh := rec.reqs[2].GetResponseHeaders()
				hs := headerValues(t, rh.GetHeaders())
				if rec.reqs[2].GetResponseHeaders().GetHeaders().GetHeaders()[0].GetKey() != ":status" {
					t.Error(":status is not the first header")
				}
				for k, want := range map[string]string{":status": "201", "content-type": "application/json", "request-id": "req_rail"} {
					if got := hs[k]; !slices.Equal(got, []string{want}) {
						t.Errorf("%s = %q, want %q", k, got, want)
					}
				}
				if _, ok := hs["x-envoy-upstream-service-time"]; !ok {
					t.Error("x-envoy-upstream-service-time missing")
				}
				if rh.GetEndOfStream() {
					t.Error("response_headers end_of_stream with a body to come")
				}
				rb := rec.reqs[3].GetResponseBody()
				if string(rb.GetBody()) != `{"id":"re_9"}` || !rb.GetEndOfStream() {
					t.Errorf("response_body %q eos=%v", rb.GetBody(), rb.GetEndOfStream())
				}
			},
		},
		{
			name: "an empty upstream body ends the stream at response_headers",
			rail: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) },
			req:  agentReq{body: refundBody},
			check: func(t *testing.T, _ *harness, rec *procRecord) {
				want := []string{"request_headers", "request_body", "response_headers"}
				if got := rec.phases(); !slices.Equal(got, want) {
					t.Fatalf("phases %v, want %v", got, want)
				}
				if !rec.reqs[2].GetResponseHeaders().GetEndOfStream() {
					t.Error("response_headers without end_of_stream")
				}
			},
		},
		{
			name: "without ext_authz metadata the metadata context is empty",
			authz: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return &authv3.CheckResponse{}, nil
			},
			req: agentReq{body: refundBody},
			check: func(t *testing.T, _ *harness, rec *procRecord) {
				for _, q := range rec.reqs {
					if q.GetMetadataContext() == nil || len(q.GetMetadataContext().GetFilterMetadata()) != 0 {
						t.Errorf("%s: metadata_context %v", phaseName(q), q.GetMetadataContext())
					}
				}
			},
		},
		{
			name: "the deprecated ok_response dynamic_metadata overrides the response's",
			authz: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				inner, _ := structpb.NewStruct(map[string]any{"countersign": map[string]any{"sik": "FROM_OK"}})
				return &authv3.CheckResponse{
					Status:          &rpcstatus.Status{Code: int32(codes.OK)},
					HttpResponse:    &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{DynamicMetadata: inner}}, //nolint:staticcheck // the deprecated field is under test
					DynamicMetadata: intentMetadata(),
				}, nil
			},
			req: agentReq{body: refundBody},
			check: func(t *testing.T, _ *harness, rec *procRecord) {
				md := rec.reqs[0].GetMetadataContext().GetFilterMetadata()[MetadataNamespace]
				if got := md.GetFields()["countersign"].GetStructValue().GetFields()["sik"].GetStringValue(); got != "FROM_OK" {
					t.Errorf("sik = %q, want FROM_OK", got)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.opts...)
			if tc.authz != nil {
				h.authz.answer = tc.authz
			}
			h.rail.setHandler(tc.rail)
			if resp := h.mustDo(tc.req); resp.status >= 300 {
				t.Fatalf("status %d %q", resp.status, resp.body)
			}
			tc.check(t, h, h.stream())
		})
	}
}

// onPhase answers the named phase with answer and every other phase with
// a continue.
func onPhase(name string, answer func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)) func(context.Context, *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	return func(_ context.Context, q *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		if phaseName(q) == name {
			return answer(q)
		}
		return nil, nil
	}
}

func common(cr *extprocv3.CommonResponse) func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	return func(q *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		return answerFor(q, cr), nil
	}
}

func immediate(ir *extprocv3.ImmediateResponse) func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	return func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: ir}}, nil
	}
}

func setHeaders(hs ...*corev3.HeaderValueOption) *extprocv3.HeaderMutation {
	return &extprocv3.HeaderMutation{SetHeaders: hs}
}

func overwrite(k, v string) *corev3.HeaderValueOption {
	o := rawHeader(k, v)
	o.AppendAction = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
	return o
}

func newBody(b string) *extprocv3.BodyMutation {
	return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(b)}}
}

func TestExtProcMutations(t *testing.T) {
	stamped := refundBody + "&metadata%5Bcountersign_sik%5D=SIK1"
	refusal := `{"error":{"code":"body_unstampable"}}`
	cases := []struct {
		name       string
		answer     func(context.Context, *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)
		rail       http.HandlerFunc
		req        agentReq
		wantStatus int
		wantBody   string // "" is not checked
		wantPhases []string
		check      func(t *testing.T, h *harness, rec *procRecord, resp agentResp)
	}{
		{
			name: "request body mutation reaches the rail with a consistent content-length",
			answer: onPhase("request_body", common(&extprocv3.CommonResponse{
				HeaderMutation: setHeaders(overwrite("content-length", strconv.Itoa(len(stamped)))),
				BodyMutation:   newBody(stamped),
			})),
			req:        agentReq{body: refundBody},
			wantStatus: 200,
			check: func(t *testing.T, h *harness, _ *procRecord, _ agentResp) {
				r := h.railSaw()
				if r.body != stamped || r.contentLength != int64(len(stamped)) || r.header.Get("Content-Length") != strconv.Itoa(len(stamped)) {
					t.Errorf("rail saw body %q, content-length %d / %q", r.body, r.contentLength, r.header.Get("Content-Length"))
				}
			},
		},
		{
			name:       "a body mutation that leaves a stale content-length is rejected: 500, never forwarded",
			answer:     onPhase("request_body", common(&extprocv3.CommonResponse{BodyMutation: newBody(stamped)})),
			req:        agentReq{body: refundBody},
			wantStatus: 500,
			wantPhases: []string{"request_headers", "request_body"},
			check: func(t *testing.T, h *harness, rec *procRecord, _ agentResp) {
				h.railUntouched()
				if !rec.cancelled {
					t.Error("the stream was not reset after the rejected mutation")
				}
			},
		},
		{
			name: "content-length removed at request_headers: the mutated body goes chunked",
			answer: func(_ context.Context, q *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				switch phaseName(q) {
				case "request_headers":
					return answerFor(q, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{"content-length"}}}), nil
				case "request_body":
					return answerFor(q, &extprocv3.CommonResponse{BodyMutation: newBody(stamped)}), nil
				}
				return nil, nil
			},
			req:        agentReq{body: refundBody},
			wantStatus: 200,
			check: func(t *testing.T, h *harness, _ *procRecord, _ agentResp) {
				r := h.railSaw()
				if r.body != stamped || !slices.Equal(r.transferEncoding, []string{"chunked"}) {
					t.Errorf("rail saw body %q, transfer-encoding %v", r.body, r.transferEncoding)
				}
			},
		},
		{
			name: "clear_body empties the request body",
			answer: onPhase("request_body", common(&extprocv3.CommonResponse{
				HeaderMutation: setHeaders(overwrite("content-length", "0")),
				BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}},
			})),
			req:        agentReq{body: refundBody},
			wantStatus: 200,
			check: func(t *testing.T, h *harness, _ *procRecord, _ agentResp) {
				if r := h.railSaw(); r.body != "" || r.contentLength != 0 {
					t.Errorf("rail saw body %q, content-length %d", r.body, r.contentLength)
				}
			},
		},
		{
			name: "response body mutation reaches the agent",
			answer: onPhase("response_body", common(&extprocv3.CommonResponse{
				HeaderMutation: setHeaders(overwrite("content-length", "13"), overwrite("x-countersign-committed", "true")),
				BodyMutation:   newBody(`{"id":"re_2"}`),
			})),
			req:        agentReq{body: refundBody},
			wantStatus: 200,
			wantBody:   `{"id":"re_2"}`,
			check: func(t *testing.T, _ *harness, _ *procRecord, resp agentResp) {
				wantValues(t, resp.header, "X-Countersign-Committed", "true")
			},
		},
		{
			name:       "a response body mutation with a stale content-length: the agent gets 500",
			answer:     onPhase("response_body", common(&extprocv3.CommonResponse{BodyMutation: newBody("{}")})),
			req:        agentReq{body: refundBody},
			wantStatus: 500,
			wantBody:   "",
			check: func(t *testing.T, h *harness, _ *procRecord, _ agentResp) {
				h.railSaw() // the rail answered; its answer never reached the agent
			},
		},
		{
			name: "request header mutations: set, append, remove, and :path",
			answer: onPhase("request_headers", common(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
				SetHeaders: []*corev3.HeaderValueOption{
					rawHeader("x-stamp", "s1"),
					{Header: &corev3.HeaderValue{Key: "x-tag", RawValue: []byte("b")}, Append: wrapperspb.Bool(true)},
					rawHeader(":path", "/v1/refunds?stamped=1"),
				},
				RemoveHeaders: []string{"X-Remove-Me"},
			}})),
			req:        agentReq{body: refundBody, header: http.Header{"X-Tag": {"a"}, "X-Remove-Me": {"1"}}},
			wantStatus: 200,
			check: func(t *testing.T, h *harness, _ *procRecord, _ agentResp) {
				r := h.railSaw()
				wantValues(t, r.header, "X-Stamp", "s1")
				wantValues(t, r.header, "X-Tag", "a", "b")
				wantValues(t, r.header, "X-Remove-Me")
				if r.uri != "/v1/refunds?stamped=1" {
					t.Errorf("rail saw %q", r.uri)
				}
			},
		},
		{
			name: "ext_proc ignores append_action: APPEND_IF_EXISTS_OR_ADD overwrites",
			answer: onPhase("request_headers", common(&extprocv3.CommonResponse{HeaderMutation: setHeaders(&corev3.HeaderValueOption{
				Header: &corev3.HeaderValue{Key: "x-tag", RawValue: []byte("b")}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD,
			})})),
			req:        agentReq{body: refundBody, header: http.Header{"X-Tag": {"a"}}},
			wantStatus: 200,
			check: func(t *testing.T, h *harness, _ *procRecord, _ agentResp) {
				wantValues(t, h.railSaw().header, "X-Tag", "b")
			},
		},
		{
			name: "a header sent in value alone is set empty: Envoy reads raw_value",
			answer: onPhase("request_headers", common(&extprocv3.CommonResponse{HeaderMutation: setHeaders(&corev3.HeaderValueOption{
				Header: &corev3.HeaderValue{Key: "idempotency-key", Value: "cs_SIK1_1"},
			})})),
			req:        agentReq{body: refundBody},
			wantStatus: 200,
			check: func(t *testing.T, h *harness, _ *procRecord, _ agentResp) {
				wantValues(t, h.railSaw().header, "Idempotency-Key", "")
			},
		},
		{
			name: "value and raw_value both set: 500, never forwarded",
			answer: onPhase("request_headers", common(&extprocv3.CommonResponse{HeaderMutation: setHeaders(&corev3.HeaderValueOption{
				Header: &corev3.HeaderValue{Key: "idempotency-key", Value: "a", RawValue: []byte("b")},
			})})),
			req:        agentReq{body: refundBody},
			wantStatus: 500,
			wantPhases: []string{"request_headers"},
			check:      func(t *testing.T, h *harness, _ *procRecord, _ agentResp) { h.railUntouched() },
		},
		{
			name: "host, :authority, :scheme, :method and x-envoy headers are not mutable",
			answer: onPhase("request_headers", common(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
				SetHeaders: []*corev3.HeaderValueOption{
					rawHeader("host", "evil.test"), rawHeader(":authority", "evil.test"), rawHeader(":scheme", "https"),
					rawHeader(":method", "DELETE"), rawHeader("x-envoy-retry-on", "5xx"),
				},
				RemoveHeaders: []string{"x-request-id-not-there", ":path"},
			}})),
			req:        agentReq{body: refundBody},
			wantStatus: 200,
			check: func(t *testing.T, h *harness, _ *procRecord, _ agentResp) {
				r := h.railSaw()
				if r.host != railHost || r.method != http.MethodPost || r.uri != "/v1/refunds" {
					t.Errorf("rail saw %s %s host %q", r.method, r.uri, r.host)
				}
				wantValues(t, r.header, "X-Envoy-Retry-On")
			},
		},
		{
			name:       "response :status can be rewritten",
			answer:     onPhase("response_headers", common(&extprocv3.CommonResponse{HeaderMutation: setHeaders(rawHeader(":status", "202"))})),
			req:        agentReq{body: refundBody},
			wantStatus: 202,
		},
		{
			name: "CONTINUE_AND_REPLACE at request_headers replaces the body and skips request_body",
			answer: onPhase("request_headers", common(&extprocv3.CommonResponse{
				Status:       extprocv3.CommonResponse_CONTINUE_AND_REPLACE,
				BodyMutation: newBody(stamped),
			})),
			req:        agentReq{body: refundBody},
			wantStatus: 200,
			wantPhases: []string{"request_headers", "response_headers", "response_body"},
			check: func(t *testing.T, h *harness, _ *procRecord, _ agentResp) {
				r := h.railSaw()
				if r.body != stamped || !slices.Equal(r.transferEncoding, []string{"chunked"}) {
					t.Errorf("rail saw body %q, transfer-encoding %v", r.body, r.transferEncoding)
				}
			},
		},
		{
			name: "immediate response at request_headers: the agent gets it, the rail never sees the request",
			answer: onPhase("request_headers", immediate(&extprocv3.ImmediateResponse{
				Status:  &typev3.HttpStatus{Code: typev3.StatusCode_BadRequest},
				Headers: setHeaders(rawHeader("content-type", "application/json")),
				Body:    []byte(refusal),
				Details: "countersign_body_unstampable",
			})),
			req:        agentReq{body: refundBody},
			wantStatus: 400,
			wantBody:   refusal,
			wantPhases: []string{"request_headers"},
			check: func(t *testing.T, h *harness, rec *procRecord, resp agentResp) {
				h.railUntouched()
				wantValues(t, resp.header, "Content-Type", "application/json")
				if !rec.halfClosed {
					t.Error("the stream was not half-closed after the immediate response")
				}
			},
		},
		{
			name: "immediate response at request_body: never forwarded",
			answer: onPhase("request_body", immediate(&extprocv3.ImmediateResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadRequest},
				Body:   []byte(refusal),
			})),
			req:        agentReq{body: refundBody},
			wantStatus: 400,
			wantBody:   refusal,
			wantPhases: []string{"request_headers", "request_body"},
			check: func(t *testing.T, h *harness, _ *procRecord, resp agentResp) {
				h.railUntouched()
				wantValues(t, resp.header, "Content-Type", "text/plain")
			},
		},
		{
			name:       "immediate response at response_headers replaces the rail's answer",
			answer:     onPhase("response_headers", immediate(&extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_Conflict}, Body: []byte("in progress")})),
			req:        agentReq{body: refundBody},
			wantStatus: 409,
			wantBody:   "in progress",
			wantPhases: []string{"request_headers", "request_body", "response_headers"},
			check:      func(t *testing.T, h *harness, _ *procRecord, _ agentResp) { h.railSaw() },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.proc.answer = tc.answer
			h.rail.setHandler(tc.rail)
			resp := h.mustDo(tc.req)
			if resp.status != tc.wantStatus {
				t.Fatalf("status %d %q, want %d", resp.status, resp.body, tc.wantStatus)
			}
			if tc.wantBody != "" && resp.body != tc.wantBody {
				t.Errorf("body %q, want %q", resp.body, tc.wantBody)
			}
			rec := h.stream()
			if tc.wantPhases != nil && !slices.Equal(rec.phases(), tc.wantPhases) {
				t.Errorf("phases %v, want %v", rec.phases(), tc.wantPhases)
			}
			if tc.check != nil {
				tc.check(t, h, rec, resp)
			}
		})
	}
}

func TestExtProcFailures(t *testing.T) {
	fail := func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		return nil, status.Error(codes.Internal, "ledger down")
	}
	cases := []struct {
		name       string
		opts       []harnessOpt
		answer     func(context.Context, *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)
		wantStatus int
		forwarded  bool
		wantPhases []string // nil: no stream reaches the processor
	}{
		{
			name:       "stream error at request_headers: 500, never forwarded",
			answer:     onPhase("request_headers", fail),
			wantStatus: 500,
			wantPhases: []string{"request_headers"},
		},
		{
			name:       "stream error at request_body: 500, never forwarded",
			answer:     onPhase("request_body", fail),
			wantStatus: 500,
			wantPhases: []string{"request_headers", "request_body"},
		},
		{
			name:       "stream error at response_body: the agent gets 500 though the rail answered",
			answer:     onPhase("response_body", fail),
			wantStatus: 500,
			forwarded:  true,
			wantPhases: []string{"request_headers", "request_body", "response_headers", "response_body"},
		},
		{
			name: "message timeout: 504, never forwarded",
			opts: []harnessOpt{func(c *Config) { c.ExtProcMessageTimeout = 100 * time.Millisecond }},
			answer: func(ctx context.Context, q *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			wantStatus: 504,
			wantPhases: []string{"request_headers"},
		},
		{
			name:       "processor unreachable: 500, never forwarded",
			opts:       []harnessOpt{func(c *Config) { c.ExtProc = deadAddr(t) }},
			wantStatus: 500,
		},
		{
			name: "a spurious answer: 500, never forwarded",
			answer: onPhase("request_headers", func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}, nil
			}),
			wantStatus: 500,
			wantPhases: []string{"request_headers"},
		},
		{
			name: "the processor ends the stream early: the exchange goes on unprocessed",
			answer: onPhase("request_headers", func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				return nil, errEndStream
			}),
			wantStatus: 200,
			forwarded:  true,
			wantPhases: []string{"request_headers"},
		},
		{
			name:       "ext_proc failure_mode_allow: a stream error lets the exchange go on",
			opts:       []harnessOpt{func(c *Config) { c.ExtProcFailureModeAllow = true }},
			answer:     onPhase("request_body", fail),
			wantStatus: 200,
			forwarded:  true,
			wantPhases: []string{"request_headers", "request_body"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.opts...)
			h.proc.answer = tc.answer
			resp := h.mustDo(agentReq{body: refundBody})
			if resp.status != tc.wantStatus {
				t.Fatalf("status %d %q, want %d", resp.status, resp.body, tc.wantStatus)
			}
			if tc.forwarded {
				if r := h.railSaw(); r.body != refundBody {
					t.Errorf("rail saw body %q", r.body)
				}
			} else {
				h.railUntouched()
			}
			if tc.wantPhases == nil {
				h.noStream()
				return
			}
			if got := h.stream().phases(); !slices.Equal(got, tc.wantPhases) {
				t.Errorf("phases %v, want %v", got, tc.wantPhases)
			}
		})
	}
}

func TestLocalRepliesThroughExtProc(t *testing.T) {
	refusal := `{"error":{"code":"exceeds_refundable"}}`
	deny := func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
		return denied(typev3.StatusCode_PaymentRequired, refusal), nil
	}
	cases := []struct {
		name       string
		skip       bool
		answer     func(context.Context, *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)
		wantStatus int
		wantBody   string
		wantPhases []string // nil: no stream
	}{
		{
			name:       "an ext_authz denial is encoded through ext_proc on a stream of its own",
			wantStatus: 402,
			wantBody:   refusal,
			wantPhases: []string{"response_headers", "response_body"},
		},
		{
			name: "ext_proc can rewrite a denial it is shown",
			answer: onPhase("response_headers", common(&extprocv3.CommonResponse{
				HeaderMutation: setHeaders(rawHeader(":status", "429")),
			})),
			wantStatus: 429,
			wantBody:   refusal,
			wantPhases: []string{"response_headers", "response_body"},
		},
		{
			name:       "with ExtProcSkipsLocalReplies a denial never reaches ext_proc",
			skip:       true,
			wantStatus: 402,
			wantBody:   refusal,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.ExtProcSkipsLocalReplies = tc.skip })
			h.authz.answer = deny
			h.proc.answer = tc.answer
			resp := h.mustDo(agentReq{body: refundBody})
			if resp.status != tc.wantStatus || resp.body != tc.wantBody {
				t.Fatalf("got %d %q, want %d %q", resp.status, resp.body, tc.wantStatus, tc.wantBody)
			}
			h.railUntouched()
			if tc.wantPhases == nil {
				h.noStream()
				return
			}
			rec := h.stream()
			if !slices.Equal(rec.phases(), tc.wantPhases) {
				t.Fatalf("phases %v, want %v", rec.phases(), tc.wantPhases)
			}
			hs := headerValues(t, rec.reqs[0].GetResponseHeaders().GetHeaders())
			if !slices.Equal(hs[":status"], []string{"402"}) {
				t.Errorf(":status = %q", hs[":status"])
			}
			if got := string(rec.reqs[1].GetResponseBody().GetBody()); got != refusal {
				t.Errorf("response_body %q", got)
			}
		})
	}
}
