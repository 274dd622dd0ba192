package envoystandin

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// Proxy is a running stand-in: one HTTP listener, its filter chain
// (ext_authz, then ext_proc when configured, then the router) and the
// route table.
type Proxy struct {
	cfg       Config
	ln        net.Listener
	srv       *http.Server
	authzConn *grpc.ClientConn
	authz     authv3.AuthorizationClient
	procConn  *grpc.ClientConn
	proc      extprocv3.ExternalProcessorClient
	upstream  *http.Client
	transport *http.Transport
	base      context.Context
	cancel    context.CancelFunc
	served    chan struct{}
	closeOnce sync.Once
}

// Start listens on cfg.Listen and serves until Close or until ctx ends.
func Start(ctx context.Context, cfg Config) (*Proxy, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	authzConn, err := grpc.NewClient(cfg.ExtAuthz, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("egress: ext_authz client: %w", err)
	}
	p := &Proxy{
		cfg:       cfg,
		authzConn: authzConn,
		authz:     authv3.NewAuthorizationClient(authzConn),
		served:    make(chan struct{}),
	}
	if cfg.ExtProc != "" {
		p.procConn, err = grpc.NewClient(cfg.ExtProc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			_ = authzConn.Close()
			return nil, fmt.Errorf("egress: ext_proc client: %w", err)
		}
		p.proc = extprocv3.NewExternalProcessorClient(p.procConn)
	}
	p.transport = &http.Transport{
		Proxy:              nil,
		DisableCompression: true, // the agent's Accept-Encoding is forwarded as sent
		DialContext:        (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:       16,
		IdleConnTimeout:    30 * time.Second,
	}
	p.upstream = &http.Client{
		Transport: p.transport,
		// The router forwards the upstream's answer; it never follows
		// redirects.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if cfg.Listener != nil {
		p.ln = cfg.Listener
	} else if p.ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Listen); err != nil {
		p.closeClients()
		return nil, fmt.Errorf("egress: listen: %w", err)
	}
	p.base, p.cancel = context.WithCancel(context.Background())
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return p.base },
	}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(p.ln)
	}()
	go func() {
		select {
		case <-ctx.Done():
			p.Close()
		case <-p.base.Done():
		}
	}()
	return p, nil
}

// Addr is the listener's address (host:port), the agent's API base.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops the listener, aborts in-flight exchanges, waits for their
// handlers to return and closes the gRPC and upstream clients.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		p.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.srv.Shutdown(ctx); err != nil {
			_ = p.srv.Close()
		}
		<-p.served
		p.closeClients()
	})
}

func (p *Proxy) closeClients() {
	_ = p.authzConn.Close()
	if p.procConn != nil {
		_ = p.procConn.Close()
	}
	p.transport.CloseIdleConnections()
}

// response is what the encoder path carries: an upstream response or a
// local reply.
type response struct {
	status  int
	headers *headerMap // regular headers; :status is status
	body    []byte
	local   bool
	// Upstream responses only: the body, not yet read when the headers
	// are encoded (ext_proc sees response_headers first), and whether the
	// upstream's headers already ended the stream.
	stream      io.ReadCloser
	endOfStream bool
	release     func()
}

func (r *response) close() {
	if r.stream != nil {
		_ = r.stream.Close()
		r.stream = nil
	}
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

// localReply builds what Envoy's sendLocalReply sends: the status, a
// text/plain body when there is one, and the caller's header changes.
func localReply(status int, body []byte, mutate func(*headerMap)) *response {
	h := &headerMap{}
	h.add("content-length", strconv.Itoa(len(body)))
	if len(body) > 0 {
		h.add("content-type", "text/plain")
	}
	if mutate != nil {
		mutate(h)
	}
	return &response{status: status, headers: h, body: body, local: true}
}

// errReset means the downstream stream must be reset: the response had
// started through the filter chain when the upstream failed.
var errReset = errors.New("egress: downstream reset")

// ServeHTTP is one HTTP exchange through the filter chain.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := p.newExchange(r)
	// The ext_proc stream is closed when the exchange ends (the filter's
	// onDestroy): after the agent has the response, as in Envoy, where
	// a processor may see the end of its stream after the agent has
	// its answer.
	defer x.finish()
	resp, err := x.run(r)
	if err != nil {
		// An abort closes the agent's connection without a response,
		// as Envoy resets the downstream stream.
		panic(http.ErrAbortHandler)
	}
	writeResponse(w, resp)
}

func (x *exchange) run(r *http.Request) (*response, error) {
	resp := x.decode(r)
	defer resp.close()
	return x.encode(resp)
}

func writeResponse(w http.ResponseWriter, resp *response) {
	h := w.Header()
	for _, e := range resp.headers.entries {
		if isPseudo(e.key) || hopByHop[e.key] || e.key == "content-length" {
			continue
		}
		h.Add(e.key, e.value)
	}
	// Go frames the body itself; the length is the body's.
	h.Set("Content-Length", strconv.Itoa(len(resp.body)))
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body) //nolint:gosec // G705: a proxy relays the body it was given
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// exchange is one request's state through the chain.
type exchange struct {
	p        *Proxy
	ctx      context.Context
	start    time.Time
	streamID uint64
	remote   string
	local    string
	proto    string

	req     *headerMap // request headers, pseudo-headers included
	body    []byte
	hasBody bool
	route   *Route

	// ext_authz results kept for later filters: the dynamic metadata
	// (namespace envoy.filters.http.ext_authz) and, after an allow, the
	// response headers to add.
	metadata    *structpb.Struct
	authzOK     bool
	respHeaders []*corev3.HeaderValueOption

	proc *procStream
}

func (p *Proxy) newExchange(r *http.Request) *exchange {
	x := &exchange{
		p:        p,
		ctx:      r.Context(),
		start:    time.Now(),
		streamID: rand.Uint64(), //nolint:gosec // G404: a stream id, not a secret (Envoy draws it from its own PRNG)
		remote:   r.RemoteAddr,
		proto:    r.Proto,
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		x.local = a.String()
	}
	if p.proc != nil {
		x.proc = &procStream{x: x, client: p.proc}
	}
	return x
}

func (x *exchange) finish() {
	if x.proc != nil {
		x.proc.finish()
	}
}

// downstreamHeaders is the request header map after Envoy's HTTP connection
// manager: the pseudo-headers from the request line and Host, the headers
// the agent sent (lower-case, hop-by-hop removed), x-forwarded-proto, and
// x-request-id, generated when absent (generate_request_id defaults to
// true) and kept on the request so ext_authz, ext_proc and the upstream
// all see it.
func downstreamHeaders(r *http.Request) *headerMap {
	h := &headerMap{}
	h.add(":method", r.Method)
	h.add(":path", r.RequestURI)
	h.add(":authority", r.Host)
	h.add(":scheme", "http")
	h.fromHTTP(r.Header)
	if !h.has("x-forwarded-proto") {
		h.add("x-forwarded-proto", "http")
	}
	if !h.has("x-request-id") {
		h.add("x-request-id", uuid4())
	}
	return h
}

func uuid4() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// maxBody bounds what the stand-in will hold of one request body.
const maxBody = 64 << 20

// decode runs the decoder filters (ext_authz, ext_proc) and the router. It
// returns the response to encode: a local reply, or the upstream's.
func (x *exchange) decode(r *http.Request) *response {
	x.req = downstreamHeaders(r)
	path, _ := x.req.first(":path")
	x.route = x.p.cfg.match(r.Host, path)
	direct := x.route != nil && x.route.DirectResponse != nil
	if direct {
		// ExtProcPerRoute{disabled: true}: no stream is opened.
		x.proc = nil
	}

	// The codec hands the body to the filters; a request whose headers end
	// the stream (no Content-Length and no chunked body, or
	// Content-Length: 0) has none.
	x.hasBody = r.ContentLength != 0
	if x.hasBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			return localReply(http.StatusBadRequest, nil, nil)
		}
		if len(b) > maxBody {
			return localReply(http.StatusRequestEntityTooLarge, []byte("Payload Too Large"), nil)
		}
		x.body = b
	}

	if x.route != nil && !direct {
		if lr := x.extAuthz(); lr != nil {
			return lr
		}
	}
	if f := x.p.cfg.RewriteBodyAfterAuthz; f != nil && x.hasBody {
		x.body = f(x.body)
	}
	if x.proc != nil {
		if lr := x.processRequest(); lr != nil {
			return lr
		}
	}
	if x.route == nil {
		// The router's route_not_found local reply.
		return localReply(http.StatusNotFound, nil, nil)
	}
	if direct {
		d := x.route.DirectResponse
		return localReply(d.Status, []byte(d.Body), func(h *headerMap) {
			for _, k := range slices.Sorted(maps.Keys(d.Headers)) {
				h.set(strings.ToLower(k), d.Headers[k])
			}
		})
	}
	return x.forward()
}

// encode runs the encoder filters over resp: ext_proc (response_headers,
// then response_body), then ext_authz's response_headers_to_add, then the
// connection manager's server header. It reads an upstream body.
func (x *exchange) encode(resp *response) (*response, error) {
	skipped := resp.local && x.p.cfg.ExtProcSkipsLocalReplies
	if x.proc != nil && !x.proc.complete && !skipped {
		out, err := x.processResponse(resp)
		if err != nil {
			return nil, err
		}
		if out != resp {
			// ext_proc answered with a local reply (an immediate
			// response or its own error); ext_proc is complete, the
			// rest of the encoder chain still runs.
			resp.close()
			return x.encode(out)
		}
	} else if err := readUpstreamBody(resp); err != nil {
		return nil, err
	}
	if x.authzOK {
		applyAuthzHeaders(x.respHeaders, resp.headers, x.p.cfg.LegacyAppend, true)
	}
	// server_header_transformation OVERWRITE (the default).
	resp.headers.set("server", "envoy")
	return resp, nil
}

// readUpstreamBody reads the rest of an upstream response. A failure after
// the headers reached the filter chain resets the downstream stream:
// Envoy's router cannot send a local reply once a response has started.
func readUpstreamBody(resp *response) error {
	if resp.stream == nil {
		return nil
	}
	b, err := io.ReadAll(resp.stream)
	resp.close()
	if err != nil {
		return errReset
	}
	resp.body = b
	return nil
}
