package envoystandin

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// hangUp closes the connection without an answer: a reset before headers.
func hangUp(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// cutBody sends headers promising 100 bytes, then 10, then hangs up.
func cutBody(w http.ResponseWriter, _ *http.Request) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":\"re")
	_ = buf.Flush()
	_ = conn.Close()
}

func TestUpstream(t *testing.T) {
	resetBody := "upstream connect error or disconnect/reset before headers. reset reason: "
	cases := []struct {
		name       string
		opts       []harnessOpt
		rail       http.HandlerFunc
		req        agentReq
		wantErr    bool // the agent's connection is reset
		wantStatus int
		wantBody   string // prefix
		wantPhases []string
		check      func(t *testing.T, h *harness, rec *procRecord)
	}{
		{
			name:       "host rewrite, path and query as sent, and the router's timeout header",
			req:        agentReq{path: "/v1/refunds?expand[]=charge", body: refundBody},
			wantStatus: 200,
			wantPhases: []string{"request_headers", "request_body", "response_headers", "response_body"},
			check: func(t *testing.T, h *harness, _ *procRecord) {
				r := h.railSaw()
				if r.host != railHost || r.uri != "/v1/refunds?expand[]=charge" || r.method != http.MethodPost {
					t.Errorf("rail saw %s %s host %q", r.method, r.uri, r.host)
				}
				wantValues(t, r.header, "X-Envoy-Expected-Rq-Timeout-Ms", "15000")
				wantValues(t, r.header, "X-Forwarded-Proto", "http")
				if r.body != refundBody || r.contentLength != int64(len(refundBody)) {
					t.Errorf("rail saw body %q, length %d", r.body, r.contentLength)
				}
			},
		},
		{
			name:       "a chunked agent body goes upstream chunked",
			req:        agentReq{body: refundBody, chunked: true},
			wantStatus: 200,
			wantPhases: []string{"request_headers", "request_body", "response_headers", "response_body"},
			check: func(t *testing.T, h *harness, _ *procRecord) {
				if r := h.railSaw(); r.body != refundBody || !slices.Equal(r.transferEncoding, []string{"chunked"}) {
					t.Errorf("rail saw body %q, transfer-encoding %v", r.body, r.transferEncoding)
				}
			},
		},
		{
			name: "redirects are passed to the agent, not followed",
			rail: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/v1/elsewhere", http.StatusFound)
			},
			req:        agentReq{body: refundBody},
			wantStatus: 302,
			// A redirect of a POST has no body: its headers end the stream.
			wantPhases: []string{"request_headers", "request_body", "response_headers"},
			check:      func(t *testing.T, h *harness, _ *procRecord) { h.railSaw() },
		},
		{
			name:       "reset before headers: 503, and ext_proc is shown the router's local reply",
			rail:       hangUp,
			req:        agentReq{body: refundBody},
			wantStatus: 503,
			wantBody:   resetBody + "connection termination",
			wantPhases: []string{"request_headers", "request_body", "response_headers", "response_body"},
			check: func(t *testing.T, _ *harness, rec *procRecord) {
				hs := headerValues(t, rec.reqs[2].GetResponseHeaders().GetHeaders())
				if !slices.Equal(hs[":status"], []string{"503"}) {
					t.Errorf(":status = %q", hs[":status"])
				}
				if !strings.HasPrefix(string(rec.reqs[3].GetResponseBody().GetBody()), resetBody) {
					t.Errorf("response_body %q", rec.reqs[3].GetResponseBody().GetBody())
				}
			},
		},
		{
			name:       "reset before headers, local replies skipping ext_proc: 503 and no response phase",
			opts:       []harnessOpt{func(c *Config) { c.ExtProcSkipsLocalReplies = true }},
			rail:       hangUp,
			req:        agentReq{body: refundBody},
			wantStatus: 503,
			wantBody:   resetBody + "connection termination",
			wantPhases: []string{"request_headers", "request_body"},
			check: func(t *testing.T, _ *harness, rec *procRecord) {
				if !rec.halfClosed {
					t.Error("the stream was not closed with a half-close")
				}
			},
		},
		{
			name: "connection refused: 503 connection failure",
			opts: []harnessOpt{func(c *Config) {
				c.Routes[0].Upstream = "http://" + deadAddr(t)
				c.ExtProcSkipsLocalReplies = true
			}},
			req:        agentReq{body: refundBody},
			wantStatus: 503,
			wantBody:   resetBody + "connection failure",
			wantPhases: []string{"request_headers", "request_body"},
		},
		{
			name: "route timeout before headers: 504",
			opts: []harnessOpt{func(c *Config) { c.Routes[0].Timeout = 150 * time.Millisecond }},
			rail: func(_ http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
			},
			req:        agentReq{body: refundBody},
			wantStatus: 504,
			wantBody:   "upstream request timeout",
			wantPhases: []string{"request_headers", "request_body", "response_headers", "response_body"},
			check: func(t *testing.T, h *harness, _ *procRecord) {
				wantValues(t, h.railSaw().header, "X-Envoy-Expected-Rq-Timeout-Ms", "150")
			},
		},
		{
			name:       "reset after headers: the agent's connection is reset; ext_proc saw response_headers only",
			rail:       cutBody,
			req:        agentReq{body: refundBody},
			wantErr:    true,
			wantPhases: []string{"request_headers", "request_body", "response_headers"},
			check: func(t *testing.T, _ *harness, rec *procRecord) {
				if rec.reqs[2].GetResponseHeaders().GetEndOfStream() {
					t.Error("response_headers end_of_stream")
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.opts...)
			h.rail.setHandler(tc.rail)
			resp, err := h.do(tc.req)
			switch {
			case tc.wantErr:
				if err == nil {
					t.Fatalf("the agent got %d %q, want a reset", resp.status, resp.body)
				}
			case err != nil:
				t.Fatal(err)
			case resp.status != tc.wantStatus || !strings.HasPrefix(resp.body, tc.wantBody):
				t.Fatalf("got %d %q, want %d %q…", resp.status, resp.body, tc.wantStatus, tc.wantBody)
			}
			rec := h.stream()
			if !slices.Equal(rec.phases(), tc.wantPhases) {
				t.Fatalf("phases %v, want %v", rec.phases(), tc.wantPhases)
			}
			if tc.check != nil {
				tc.check(t, h, rec)
			}
		})
	}
}

func TestRouting(t *testing.T) {
	cases := []struct {
		name       string
		host, path string
		routes     func(rail string) []Route
		wantStatus int
		wantCheck  bool
		wantURI    string
	}{
		{
			name: "the agent's host picks the route, with or without a port",
			host: agentHost + ":443", wantStatus: 200, wantCheck: true, wantURI: "/v1/refunds",
		},
		{
			name: "no route: 404 and ext_authz is skipped",
			host: "api.unknown.test", wantStatus: 404,
		},
		{
			name: "a path-prefix route",
			host: "anything.test",
			routes: func(rail string) []Route {
				return []Route{{Prefix: "/v1/", Upstream: rail + "/base"}}
			},
			wantStatus: 200, wantCheck: true, wantURI: "/base/v1/refunds",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, withoutProc)
			if tc.routes != nil {
				h.proxy.Close()
				cfg := h.proxy.cfg
				cfg.Routes = tc.routes(h.rail.srv.URL)
				p, err := Start(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				h.proxy = p
			}
			resp := h.mustDo(agentReq{host: tc.host, body: refundBody})
			if resp.status != tc.wantStatus {
				t.Fatalf("status %d %q, want %d", resp.status, resp.body, tc.wantStatus)
			}
			if got := len(h.authz.requests()); (got == 1) != tc.wantCheck {
				t.Errorf("ext_authz called %d times", got)
			}
			if !tc.wantCheck {
				h.railUntouched()
				return
			}
			if r := h.railSaw(); r.uri != tc.wantURI {
				t.Errorf("rail saw %q, want %q", r.uri, tc.wantURI)
			}
		})
	}
}

// TestDirectResponse models envoy/egress.yaml's catch-all `unknown` route:
// a direct_response with ext_authz and ext_proc disabled on the route.
func TestDirectResponse(t *testing.T) {
	const unknown = `{"error":{"code":"unknown_host"}}`
	cases := []struct {
		name            string
		host            string
		headers         map[string]string
		wantStatus      int
		wantContentType string
		wantBody        string
		wantCheck       bool
	}{
		{name: "a served host still reaches the rail", host: agentHost, wantStatus: 200, wantCheck: true},
		{name: "any other host gets the route's answer, untouched by either filter", host: "api.stripe.com",
			headers: map[string]string{"Content-Type": "application/json"}, wantStatus: 404, wantContentType: "application/json", wantBody: unknown},
		{name: "without response_headers_to_add a local reply is text/plain", host: "127.0.0.1:9",
			wantStatus: 404, wantContentType: "text/plain", wantBody: unknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.proxy.Close()
			cfg := h.proxy.cfg
			cfg.Routes = append(cfg.Routes, Route{Prefix: "*", DirectResponse: &DirectResponse{Status: 404, Body: unknown, Headers: tc.headers}})
			p, err := Start(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			h.proxy = p
			resp := h.mustDo(agentReq{host: tc.host, body: refundBody})
			if resp.status != tc.wantStatus {
				t.Fatalf("status %d %q, want %d", resp.status, resp.body, tc.wantStatus)
			}
			if tc.wantCheck {
				h.check()
				h.railSaw()
				h.stream()
				return
			}
			if resp.body != tc.wantBody || resp.header.Get("Content-Type") != tc.wantContentType || resp.header.Get("Server") != "envoy" {
				t.Errorf("answer %q, content-type %q, server %q", resp.body, resp.header.Get("Content-Type"), resp.header.Get("Server"))
			}
			if n := len(h.authz.requests()); n != 0 {
				t.Errorf("ext_authz called %d times, want none", n)
			}
			h.railUntouched()
			h.noStream()
		})
	}
}

// TestStartOnAGivenListener: a caller that must know its port before it
// writes the route table opens the socket itself.
func TestStartOnAGivenListener(t *testing.T) {
	h := newHarness(t, withoutProc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := h.proxy.cfg
	cfg.Listener = ln
	cfg.Routes = []Route{{Prefix: ln.Addr().String(), Upstream: h.rail.srv.URL}}
	p, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.proxy.Close()
	h.proxy = p
	if p.Addr() != ln.Addr().String() {
		t.Fatalf("Addr %s, want the given listener's %s", p.Addr(), ln.Addr())
	}
	if resp := h.mustDo(agentReq{host: p.Addr(), body: refundBody}); resp.status != 200 {
		t.Fatalf("status %d %q", resp.status, resp.body)
	}
	p.Close()
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the given listener still accepts after Close")
	}
}

func TestStart(t *testing.T) {
	good := func() Config {
		return Config{ExtAuthz: "127.0.0.1:1", Routes: []Route{{Prefix: agentHost, Upstream: "http://127.0.0.1:2"}}}
	}
	cases := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "ExtAuthz is required", mutate: func(c *Config) { c.ExtAuthz = "" }, wantErr: "ExtAuthz"},
		{name: "a route is required", mutate: func(c *Config) { c.Routes = nil }, wantErr: "Route"},
		{name: "TLS origination is not modelled", mutate: func(c *Config) { c.Routes[0].Upstream = "https://api.stripe.com" }, wantErr: "http://"},
		{name: "status_on_error must be an HTTP status", mutate: func(c *Config) { c.StatusOnError = 42 }, wantErr: "status 42"},
		{name: "a direct response needs an HTTP status", mutate: func(c *Config) {
			c.Routes = append(c.Routes, Route{Prefix: "*", DirectResponse: &DirectResponse{Status: 42}})
		}, wantErr: "DirectResponse.Status 42"},
		{name: "a direct response has no upstream", mutate: func(c *Config) {
			c.Routes = append(c.Routes, Route{Prefix: "*", Upstream: "http://127.0.0.1:3", DirectResponse: &DirectResponse{Status: 404}})
		}, wantErr: "no Upstream"},
		{name: "defaults: 503 on error, fail closed, Envoy's timeouts", mutate: func(*Config) {}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good()
			tc.mutate(&cfg)
			p, err := Start(context.Background(), cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					if p != nil {
						p.Close()
					}
					t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			c := p.cfg
			if c.StatusOnError != 503 || c.FailureModeAllow || c.Timeout != 200*time.Millisecond ||
				c.ExtProcMessageTimeout != 200*time.Millisecond || c.ExtProcStatusOnError != 500 ||
				c.Routes[0].Timeout != 15*time.Second || !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
				t.Errorf("defaults: %+v, addr %s", c, p.Addr())
			}
		})
	}
}

func TestStartContextEndsTheProxy(t *testing.T) {
	h := newHarness(t, withoutProc)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, h.proxy.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-p.served:
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy still serves 5s after its context ended")
	}
	p.Close() // idempotent
}
