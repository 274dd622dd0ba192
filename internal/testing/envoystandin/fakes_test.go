package envoystandin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Host the agent talks to and the rail host the route rewrites it to.
const (
	agentHost = "api.stripe.test"
	railHost  = "api.stripe.com"
)

// authzServer is a fake envoy.service.auth.v3.Authorization that records
// every CheckRequest.
type authzServer struct {
	authv3.UnimplementedAuthorizationServer
	mu     sync.Mutex
	reqs   []*authv3.CheckRequest
	answer func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error)
}

func (s *authzServer) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	answer := s.answer
	s.mu.Unlock()
	return answer(ctx, req)
}

func (s *authzServer) requests() []*authv3.CheckRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*authv3.CheckRequest(nil), s.reqs...)
}

// errEndStream makes the fake processor end the stream with OK status.
var errEndStream = errors.New("end the stream")

// procServer is a fake envoy.service.ext_proc.v3.ExternalProcessor: it
// records each stream and answers each message with answer, or with an
// empty continue when answer returns nil.
type procServer struct {
	extprocv3.UnimplementedExternalProcessorServer
	mu      sync.Mutex
	answer  func(context.Context, *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)
	ended   chan *procRecord
	started atomic.Int32
}

// procRecord is one stream as the processor saw it.
type procRecord struct {
	reqs []*extprocv3.ProcessingRequest
	// halfClosed: the proxy half-closed the stream (Recv saw io.EOF).
	halfClosed bool
	// cancelled: the proxy reset the stream.
	cancelled bool
}

func (r *procRecord) phases() []string {
	var out []string
	for _, q := range r.reqs {
		out = append(out, phaseName(q))
	}
	return out
}

func phaseName(q *extprocv3.ProcessingRequest) string {
	switch q.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingRequest_ResponseBody:
		return "response_body"
	}
	return "other"
}

func (s *procServer) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	s.started.Add(1)
	rec := &procRecord{}
	defer func() { s.ended <- rec }()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			rec.halfClosed = true
			return nil
		}
		if err != nil {
			rec.cancelled = true
			return err
		}
		rec.reqs = append(rec.reqs, req)
		s.mu.Lock()
		answer := s.answer
		s.mu.Unlock()
		var resp *extprocv3.ProcessingResponse
		if answer != nil {
			resp, err = answer(stream.Context(), req)
		}
		if errors.Is(err, errEndStream) {
			return nil
		}
		if err != nil {
			return err
		}
		if resp == nil {
			resp = continueFor(req)
		}
		if err := stream.Send(resp); err != nil {
			rec.cancelled = true
			return err
		}
	}
}

// continueFor is the empty answer to req's phase.
func continueFor(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	return answerFor(req, &extprocv3.CommonResponse{})
}

// answerFor wraps cr in the answer type of req's phase.
func answerFor(req *extprocv3.ProcessingRequest, cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: cr}}}
	case *extprocv3.ProcessingRequest_RequestBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: cr}}}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: cr}}}
	case *extprocv3.ProcessingRequest_ResponseBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: cr}}}
	}
	return &extprocv3.ProcessingResponse{}
}

// upstreamRecord is one request as the rail saw it.
type upstreamRecord struct {
	method, uri, host string
	header            http.Header
	body              string
	contentLength     int64
	transferEncoding  []string
}

// rail is the httptest upstream.
type rail struct {
	srv     *httptest.Server
	mu      sync.Mutex
	records []upstreamRecord
	handler http.HandlerFunc
}

func (u *rail) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.records = append(u.records, upstreamRecord{
		method: r.Method, uri: r.RequestURI, host: r.Host, header: r.Header.Clone(),
		body: string(b), contentLength: r.ContentLength, transferEncoding: r.TransferEncoding,
	})
	h := u.handler
	u.mu.Unlock()
	if h == nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"re_1","object":"refund"}`)
		return
	}
	h(w, r)
}

func (u *rail) seen() []upstreamRecord {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamRecord(nil), u.records...)
}

func (u *rail) setHandler(h http.HandlerFunc) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.handler = h
}

// harness wires a fake ext_authz, a fake ext_proc, a rail and the proxy.
type harness struct {
	t      *testing.T
	authz  *authzServer
	proc   *procServer
	rail   *rail
	proxy  *Proxy
	client *http.Client
}

type harnessOpt func(*Config)

// allow answers OK with Countersign's ALLOW: the rail key overwrites the
// agent's credential, the other credential headers are removed, and the
// intent goes in the dynamic metadata.
func allow(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{
		Status: &status.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
			Headers:         []*corev3.HeaderValueOption{hvo("authorization", "Bearer sk_rail", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)},
			HeadersToRemove: []string{"x-api-key"},
		}},
		DynamicMetadata: intentMetadata(),
	}, nil
}

func intentMetadata() *structpb.Struct {
	s, _ := structpb.NewStruct(map[string]any{"countersign": map[string]any{
		"rail_account": "acct_test", "sik": "SIK1", "attempt_seq": "1",
	}})
	return s
}

func hvo(k, v string, action corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}, AppendAction: action}
}

func hvoAppend(k, v string, appendBool bool) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}, Append: wrapperspb.Bool(appendBool)} //nolint:staticcheck // the deprecated field is under test
}

func denied(code typev3.StatusCode, body string, headers ...*corev3.HeaderValueOption) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status: &status.Status{Code: int32(codes.PermissionDenied)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: code}, Headers: headers, Body: body,
		}},
	}
}

func serveGRPC(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

func newHarness(t *testing.T, opts ...harnessOpt) *harness {
	t.Helper()
	h := &harness{
		t:     t,
		authz: &authzServer{answer: allow},
		proc:  &procServer{ended: make(chan *procRecord, 16)},
		rail:  &rail{},
	}
	authzAddr := serveGRPC(t, func(s *grpc.Server) { authv3.RegisterAuthorizationServer(s, h.authz) })
	procAddr := serveGRPC(t, func(s *grpc.Server) { extprocv3.RegisterExternalProcessorServer(s, h.proc) })
	h.rail.srv = httptest.NewServer(h.rail)
	t.Cleanup(h.rail.srv.Close)

	cfg := Config{
		ExtAuthz: authzAddr,
		ExtProc:  procAddr,
		Routes: []Route{{
			Prefix:            agentHost,
			Upstream:          h.rail.srv.URL,
			HostRewrite:       railHost,
			ContextExtensions: map[string]string{"rail_account": "acct_test", "rail_host": railHost},
		}},
		MaxRequestBytes:       64,
		AllowPartialMessage:   true,
		Timeout:               5 * time.Second,
		ExtProcMessageTimeout: 5 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.proxy = p
	tr := &http.Transport{Proxy: nil, DisableCompression: true}
	h.client = &http.Client{
		Transport:     tr,
		Timeout:       20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		p.Close()
	})
	return h
}

func withoutProc(c *Config) { c.ExtProc = "" }

// agentReq is what the agent sends.
type agentReq struct {
	method, path, host, body string
	header                   http.Header
	chunked                  bool
}

type agentResp struct {
	status int
	header http.Header
	body   string
}

// do sends r through the proxy as an unmodified SDK would.
func (h *harness) do(r agentReq) (agentResp, error) {
	h.t.Helper()
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = "/v1/refunds"
	}
	if r.host == "" {
		r.host = agentHost
	}
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
		if r.chunked {
			body = io.MultiReader(strings.NewReader(r.body)) // unknown length: chunked
		}
	}
	req, err := http.NewRequest(r.method, "http://"+h.proxy.Addr()+r.path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Host = r.host
	for k, vs := range r.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if r.header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer cs_agent_credential")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return agentResp{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return agentResp{}, err
	}
	return agentResp{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

func (h *harness) mustDo(r agentReq) agentResp {
	h.t.Helper()
	resp, err := h.do(r)
	if err != nil {
		h.t.Fatalf("agent request: %v", err)
	}
	return resp
}

// stream waits for the next ext_proc stream to end.
func (h *harness) stream() *procRecord {
	h.t.Helper()
	select {
	case r := <-h.proc.ended:
		return r
	case <-time.After(10 * time.Second):
		h.t.Fatal("no ext_proc stream ended within 10s")
		return nil
	}
}

// noStream asserts that no ext_proc stream was opened. Closing the proxy
// waits for its handlers, and any stream they had opened would have had a
// message answered by the processor, so Process would have started.
func (h *harness) noStream() {
	h.t.Helper()
	h.proxy.Close()
	if n := h.proc.started.Load(); n != 0 {
		h.t.Fatalf("%d ext_proc streams were opened, want none", n)
	}
}

// check returns the only CheckRequest.
func (h *harness) check() *authv3.CheckRequest {
	h.t.Helper()
	reqs := h.authz.requests()
	if len(reqs) != 1 {
		h.t.Fatalf("ext_authz got %d checks, want 1", len(reqs))
	}
	return reqs[0]
}

// railSaw returns the only upstream request.
func (h *harness) railSaw() upstreamRecord {
	h.t.Helper()
	seen := h.rail.seen()
	if len(seen) != 1 {
		h.t.Fatalf("rail got %d requests, want 1", len(seen))
	}
	return seen[0]
}

func (h *harness) railUntouched() {
	h.t.Helper()
	if seen := h.rail.seen(); len(seen) != 0 {
		h.t.Fatalf("rail got %d requests, want none: %+v", len(seen), seen[0])
	}
}

// headerValues flattens an ext_proc header map; it fails if Envoy's value
// field is used instead of raw_value.
func headerValues(t *testing.T, hm *corev3.HeaderMap) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, h := range hm.GetHeaders() {
		if h.GetValue() != "" {
			t.Errorf("header %q sent in value, want raw_value", h.GetKey())
		}
		out[h.GetKey()] = append(out[h.GetKey()], string(h.GetRawValue()))
	}
	return out
}

func rawHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
}
