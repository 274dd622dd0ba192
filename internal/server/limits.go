package server

import (
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

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
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: httpIdleTimeout}),
	}
}

// boundBodies refuses a request body over limit bytes (413 when its
// declared length says so; a read error past it otherwise) and drops one
// not read within httpBodyTimeout.
func boundBodies(next http.Handler, limit int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
