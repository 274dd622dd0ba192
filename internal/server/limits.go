package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/countersign/countersign/internal/config"
)

// What one caller of the API listener (gRPC) or the HTTP listener (REST,
// the console) may make Countersign hold before it is known who asks: the
// agent reaches both from inside the pod, and a cluster neighbour the HTTP
// one, with no credential at all. A message is read whole before any
// interceptor (the owner guard among them) sees it, and grpc-gateway reads
// a REST body whole before it calls the gRPC server, so without these one
// large request grew the heap by five times its size (a 96 MiB body: 480
// MiB, past the sidecar's 256 MiB limit) and a body stalled after its
// headers held its connection for ever.
const (
	// apiMessageFloor is the largest owner message or native Decide the API
	// takes, unless --max-request-bytes needs more: the largest mandate (a
	// thousand payees of 255 bytes, every list at its bound) is under 300
	// KiB.
	apiMessageFloor = 512 << 10
	// apiMaxStreams bounds the calls one connection may have in flight,
	// and apiMaxConns the connections the API listener serves at once
	// (more wait to be accepted). A stalled message is held until its
	// connection closes, so these three bound what unknown callers make
	// the API listener hold: 16 × 8 × 512 KiB, 64 MiB (grpc-go grows a
	// stream's window to the message it declares).
	apiMaxStreams = 8
	apiMaxConns   = 16
	// apiHandshakeTimeout drops a connection that has not finished its
	// HTTP/2 handshake, so that idle connections do not keep the slots.
	apiHandshakeTimeout = 10 * time.Second
	// httpIdleTimeout closes a kept-alive connection with no request.
	httpIdleTimeout = 2 * time.Minute
	// httpMaxConns bounds the connections the HTTP listener serves at once
	// (more wait to be accepted), as apiMaxConns does the API listener's:
	// each costs some 19 KB of buffers and goroutine, and the listener of
	// an injected sidecar is open to the agent in its pod (and to every
	// pod of the cluster), which without a bound opened enough idle ones
	// to have the sidecar OOM-killed — every payment stopped, and the
	// agent could bind the port while it restarted (found by a review). A
	// connection with no request in flight yields its slot to one that
	// waits (slotListener); one in flight keeps it for at most
	// ReadHeaderTimeout or httpBodyTimeout while its request is read.
	httpMaxConns = 64
	// httpMaxHeaderBytes bounds a request's header block, on the HTTP
	// listener and (as gRPC's header list) on the API listener: grpc-go's
	// own default is 16 MiB, held per stream before any interceptor knows
	// who asks (8 streams on 16 connections: 2 GiB).
	httpMaxHeaderBytes = 64 << 10
)

// httpBodyTimeout bounds reading a request's body, from its handler's
// start: a body stalled after its headers is dropped then. Requests
// without a body (the watch streams among them) are not bound by it. A
// variable for the test that waits for it.
var httpBodyTimeout = 30 * time.Second

// httpWriteStall bounds how long one write of a response may wait for the
// caller to read: a caller that stops reading (a full receive window, or
// pipelined requests whose answers it never drains) loses its connection
// then, instead of holding it, and its slot of httpMaxConns, for ever. A
// response that keeps making progress (a watch stream) is never cut. A
// variable for the test that waits for it.
var httpWriteStall = 10 * time.Second

// progressWriter gives each write of a response httpWriteStall to reach
// the caller (see httpWriteStall).
type progressWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (p progressWriter) Write(b []byte) (int, error) {
	_ = p.rc.SetWriteDeadline(time.Now().Add(httpWriteStall))
	return p.ResponseWriter.Write(b)
}

func (p progressWriter) WriteHeader(code int) {
	_ = p.rc.SetWriteDeadline(time.Now().Add(httpWriteStall))
	p.ResponseWriter.WriteHeader(code)
}

func (p progressWriter) Flush() { _ = p.FlushError() }

// FlushError is Flush that says when the caller did not take the bytes
// (http.ResponseController.Flush prefers it, so grpc-gateway sees it).
func (p progressWriter) FlushError() error {
	_ = p.rc.SetWriteDeadline(time.Now().Add(httpWriteStall))
	return p.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (p progressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// apiMaxMessage is the largest message the API listener reads and the
// largest REST body: room for a native Decide of a --max-request-bytes
// body, and at least apiMessageFloor.
func apiMaxMessage(cfg config.Config) int {
	return max(apiMessageFloor, cfg.MaxRequestBytes+64<<10)
}

// apiLimits are the API listener's bounds on what a caller makes it hold.
func apiLimits(cfg config.Config) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(apiMaxMessage(cfg)),
		grpc.MaxHeaderListSize(httpMaxHeaderBytes),
		grpc.MaxConcurrentStreams(apiMaxStreams),
		grpc.ConnectionTimeout(apiHandshakeTimeout),
		// A client pinging more often than this is sent GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: httpIdleTimeout,
			MaxConnectionAge: apiMaxConnectionAge, MaxConnectionAgeGrace: apiMaxConnectionAgeGrace}),
		// The listener is slotListener: its connections' calls are counted.
		grpc.Creds(newSlotCreds()),
		grpc.StatsHandler(slotStats{}),
	}
}

// boundBodies refuses a request body over limit bytes (413 when its
// declared length says so; a read error past it otherwise), drops one not
// read within httpBodyTimeout, and gives each write of the answer
// httpWriteStall to be read.
func boundBodies(next http.Handler, limit int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w = progressWriter{ResponseWriter: w, rc: rc}
		// An answer with no Write (a redirect to HEAD, a 204) is written by
		// net/http after the handler returns, and the end of a chunked one
		// too: that last write gets its deadline here (found by a review:
		// pipelined HEAD /console, never read, held every slot).
		_ = rc.SetWriteDeadline(time.Now().Add(httpWriteStall))
		defer func() { _ = rc.SetWriteDeadline(time.Now().Add(httpWriteStall)) }()
		if r.Body != nil && r.Body != http.NoBody {
			if r.ContentLength > int64(limit) {
				http.Error(w, fmt.Sprintf("request body of %d bytes; at most %d are read", r.ContentLength, limit), http.StatusRequestEntityTooLarge)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, int64(limit))
			// An error means the connection cannot take a deadline (an
			// HTTP/2 stream through a wrapper): the size bound still holds.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(httpBodyTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// Bounds on how long the API listener keeps a connection and the streams
// on it: past apiMaxConnectionAge a connection is sent GOAWAY (the client
// reconnects for its next call), and past the grace what still runs on it
// is cut. So no stream, an owner's watch among them, holds a slot for
// longer, and no message stalled mid-body, which holds its stream before
// any interceptor knows who asks, holds one for ever. Variables for the
// test that waits for them.
var (
	apiMaxConnectionAge      = 5 * time.Minute
	apiMaxConnectionAgeGrace = 30 * time.Second
)

// apiHealthWatchBound is the longest a Health/Watch on the API listener
// stays open (see apiHealth).
const apiHealthWatchBound = 30 * time.Second

// apiHealth is grpc.health.v1 on the API listener, which anyone in the pod
// reaches without a credential. Check and List answer as health.Server
// does; Watch reports until the server is SERVING, then ends, and ends
// anyway after apiHealthWatchBound (DeadlineExceeded). A watch that stayed
// open for as long as the caller liked kept its connection from ever being
// idle, so sixteen of them held every slot of the listener and no owner or
// agent call got through. Wait for readiness with Check; a process that
// watches health, over the Envoy listener, is not bound.
type apiHealth struct {
	healthpb.HealthServer
}

// errServingSent ends the inner watch once SERVING is out.
var errServingSent = errors.New("serving sent")

func (h apiHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithTimeout(stream.Context(), apiHealthWatchBound)
	defer cancel()
	s := &untilServing{Health_WatchServer: stream, ctx: ctx}
	err := h.HealthServer.Watch(req, s)
	switch {
	case s.served: // health.Server answers Canceled to the Send error
		return nil
	case ctx.Err() != nil && stream.Context().Err() == nil:
		return status.Errorf(codes.DeadlineExceeded, "a health watch on this listener ends after %s, or once SERVING is sent; poll Check", apiHealthWatchBound)
	}
	return err
}

type untilServing struct {
	healthpb.Health_WatchServer
	ctx    context.Context
	served bool
}

func (s *untilServing) Context() context.Context { return s.ctx }

func (s *untilServing) Send(m *healthpb.HealthCheckResponse) error {
	if err := s.Health_WatchServer.Send(m); err != nil {
		return err
	}
	if m.GetStatus() == healthpb.HealthCheckResponse_SERVING {
		s.served = true
		return errServingSent
	}
	return nil
}

// apiFreshConn is how long a newly accepted connection keeps its slot
// before its first call: room for its HTTP/2 handshake, so that a flood
// of new connections cannot evict it before it has asked anything.
const apiFreshConn = time.Second

// slotListener serves at most max connections at once, like
// netutil.LimitListener, but a connection with no call in flight does not
// keep its slot from one that is waiting: the one idle longest is closed
// for it. Without that, apiMaxConns connections that never call (or call
// now and then) kept everyone else out until MaxConnectionIdle, and again
// as soon as they reconnected. What still holds a slot is a call in
// flight, which the connection's age bounds (apiMaxConnectionAge).
// Calls are counted by slotStats, through the AuthInfo slotCreds gives each
// connection.
type slotListener struct {
	net.Listener
	max  int
	now  func() time.Time
	done chan struct{}

	mu      sync.Mutex
	conns   map[*slotConn]struct{}
	changed chan struct{} // closed and replaced when a slot may have freed
	once    sync.Once
}

func newSlotListener(l net.Listener, maxConns int) *slotListener {
	return &slotListener{Listener: l, max: maxConns, now: time.Now, done: make(chan struct{}),
		conns: map[*slotConn]struct{}{}, changed: make(chan struct{})}
}

type slotConn struct {
	net.Conn
	l        *slotListener
	accepted time.Time
	// Under l.mu: calls in flight, when the last one ended (or accepted),
	// and whether a call ever began.
	active int
	last   time.Time
	called bool
}

// Accept waits for a free slot, evicting an idle connection when one
// waits, and returns the next connection.
func (l *slotListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		l.mu.Lock()
		if len(l.conns) < l.max {
			sc := &slotConn{Conn: c, l: l, accepted: l.now()}
			sc.last = sc.accepted
			l.conns[sc] = struct{}{}
			l.mu.Unlock()
			return sc, nil
		}
		victim, wake := l.idlest()
		if victim != nil {
			delete(l.conns, victim)
			l.mu.Unlock()
			_ = victim.Conn.Close()
			continue
		}
		changed := l.changed
		l.mu.Unlock()
		if !l.wait(changed, wake) {
			_ = c.Close()
			return nil, net.ErrClosed
		}
	}
}

// wait returns when changed is closed or after wake (if not 0); false when
// the listener is closed.
func (l *slotListener) wait(changed <-chan struct{}, wake time.Duration) bool {
	var tick <-chan time.Time
	if wake > 0 {
		t := time.NewTimer(wake)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-changed:
	case <-tick:
	case <-l.done:
		return false
	}
	return true
}

// idlest is the connection with no call in flight idle longest, past its
// first apiFreshConn; otherwise nil and how long until a fresh connection
// may be evicted (0: not before a call ends). Under l.mu.
func (l *slotListener) idlest() (*slotConn, time.Duration) {
	now := l.now()
	var victim *slotConn
	var wake time.Duration
	for c := range l.conns {
		if c.active > 0 {
			continue
		}
		if !c.called {
			if left := apiFreshConn - now.Sub(c.accepted); left > 0 {
				if wake == 0 || left < wake {
					wake = left
				}
				continue
			}
		}
		if victim == nil || c.last.Before(victim.last) {
			victim = c
		}
	}
	return victim, wake
}

// open is how many connections the listener holds.
func (l *slotListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// busy is how many connections have a call or request in flight.
func (l *slotListener) busy() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for c := range l.conns {
		if c.active > 0 {
			n++
		}
	}
	return n
}

// notify wakes an Accept waiting for a slot. Under l.mu.
func (l *slotListener) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *slotListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (c *slotConn) Close() error {
	c.l.mu.Lock()
	if _, ok := c.l.conns[c]; ok {
		delete(c.l.conns, c)
		c.l.notify()
	}
	c.l.mu.Unlock()
	return c.Conn.Close()
}

func (c *slotConn) begin() {
	c.l.mu.Lock()
	c.active++
	c.called = true
	c.l.mu.Unlock()
}

func (c *slotConn) end() {
	c.l.mu.Lock()
	c.active--
	c.last = c.l.now()
	if c.active == 0 {
		c.l.notify()
	}
	c.l.mu.Unlock()
}

// trackHTTP is the HTTP server's ConnState hook for a slotListener: a
// connection that has read a byte of a request has one in flight until
// it is idle again (net/http reports StateActive, then StateIdle; an
// HTTP/2 connection, StateActive while it has streams).
func (l *slotListener) trackHTTP(c net.Conn, st http.ConnState) {
	sc, ok := c.(*slotConn)
	if !ok || sc.l != l {
		return
	}
	switch st {
	case http.StateActive:
		sc.begin()
	case http.StateIdle:
		sc.end()
	}
}

// slotCreds is insecure transport credentials (the API listener is plain
// TCP or a Unix socket) whose AuthInfo names the slotConn, so that
// slotStats finds the connection of each call.
type slotCreds struct {
	credentials.TransportCredentials
}

type slotInfo struct {
	credentials.CommonAuthInfo
	conn *slotConn
}

func (slotInfo) AuthType() string { return "insecure" }

func newSlotCreds() credentials.TransportCredentials {
	return slotCreds{TransportCredentials: insecure.NewCredentials()}
}

func (c slotCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if sc, ok := raw.(*slotConn); ok && err == nil {
		return conn, slotInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, conn: sc}, nil
	}
	return conn, info, err
}

func (c slotCreds) Clone() credentials.TransportCredentials {
	return slotCreds{TransportCredentials: c.TransportCredentials.Clone()}
}

// slotStats counts each connection's calls in flight (slotListener).
type slotStats struct{}

func (slotStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (slotStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (slotStats) HandleConn(context.Context, stats.ConnStats)                       {}

func (slotStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return
	}
	info, ok := p.AuthInfo.(slotInfo)
	if !ok {
		return
	}
	switch s.(type) {
	case *stats.Begin:
		info.conn.begin()
	case *stats.End:
		info.conn.end()
	}
}
