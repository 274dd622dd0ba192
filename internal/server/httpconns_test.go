package server

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestHTTPListenerServesBoundedConnections: the HTTP listener (open, in an
// injected sidecar, to the agent and to every pod of the cluster) serves
// at most httpMaxConns connections at once. A caller keeping hundreds of
// connections open after one request each (each ~19 KB of the sidecar's
// memory, kept for httpIdleTimeout) holds no more than that many: the
// idlest ones are closed for newcomers, and a probe still gets its answer
// at once. Connections each in the middle of a request keep their slots,
// and one past them waits to be accepted until one ends (found by a
// review: the listener accepted without bound, and enough idle connections
// had the sidecar OOM-killed).
func TestHTTPListenerServesBoundedConnections(t *testing.T) {
	h := start(t, pgtest.NewDatabase(t))
	addr := h.srv.HTTPAddr()
	get := func(c net.Conn) error {
		if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: countersign\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	probe := func(within time.Duration) error {
		c, err := net.DialTimeout("tcp", addr, within)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(within))
		return get(c)
	}
	// open dials n connections; each sends one request and is kept.
	open := func(n int) []net.Conn {
		var out []net.Conn
		for range n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if err := get(c); err != nil {
				// Its slot was given to a later one: the bound at work.
				continue
			}
		}
		return out
	}
	closeAll := func(cs []net.Conn) {
		for _, c := range cs {
			c.Close()
		}
	}
	// Four times the bound, each idle after its request.
	idle := open(4 * httpMaxConns)
	alive := 0
	for _, c := range idle {
		// A connection the server closed reads EOF at once; a kept one
		// would block until the deadline, so probe with a short one.
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				alive++
			}
		}
	}
	if alive > httpMaxConns {
		t.Fatalf("%d of %d idle connections are still open; the listener keeps at most %d", alive, len(idle), httpMaxConns)
	}
	if err := probe(5 * time.Second); err != nil {
		t.Fatalf("a probe past %d idle connections = %v; want it served", len(idle), err)
	}
	closeAll(idle)

	// Connections each in the middle of a request header: net/http counts
	// a connection active only once its request is read, so they yield
	// their slots too (and ReadHeaderTimeout drops them anyway).
	var partial []net.Conn
	for range 2 * httpMaxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		partial = append(partial, c)
		_, _ = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: countersign\r\n")
	}
	if err := probe(5 * time.Second); err != nil {
		t.Fatalf("a probe past %d connections stalled in their headers = %v; want it served", len(partial), err)
	}
	closeAll(partial)

	// Connections each in the middle of a request body (a REST call whose
	// body declares 100 bytes and sends 10): they keep their slots, for at
	// most httpBodyTimeout, and one past them waits until one ends.
	var held []net.Conn
	defer func() { closeAll(held) }()
	if !wait.Until(10*time.Second, func() bool {
		for len(held) < httpMaxConns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return false
			}
			held = append(held, c)
			if _, err := fmt.Fprintf(c, "POST /v1/agents HTTP/1.1\r\nHost: countersign\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":\"a"); err != nil {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("could not open %d connections", httpMaxConns)
	}
	// Their requests are read (the handlers wait on the bodies) before the
	// listener is full of active connections; until then a probe may pass.
	if !wait.Until(10*time.Second, func() bool { return probe(500*time.Millisecond) != nil }) {
		t.Fatalf("probes past %d connections with requests in flight were served; want them to wait", httpMaxConns)
	}
	held[0].Close()
	held = held[1:]
	if err := probe(5 * time.Second); err != nil {
		t.Fatalf("a probe once a connection closed = %v; want it served", err)
	}
}

// TestHTTPCallerThatStopsReadingLosesItsSlot: a caller that sends requests
// (pipelined, for a 100 KiB answer each) on every one of httpMaxConns
// connections, with a tiny receive window, and never reads the answers
// kept each handler blocked in a write, each connection active, and every
// slot held for ever: kubelet's probes on the port then timed out (found
// by a review of the bound). Each write now has httpWriteStall to be read;
// past it the connection is closed and a probe is served.
func TestHTTPCallerThatStopsReadingLosesItsSlot(t *testing.T) {
	// Restored once the server and its handlers are gone (cleanups run
	// last first: start's stop the server and wait for its goroutines).
	t.Cleanup(func(d time.Duration) func() { return func() { httpWriteStall = d } }(httpWriteStall))
	httpWriteStall = 3 * time.Second
	h := start(t, pgtest.NewDatabase(t))
	addr := h.srv.HTTPAddr()
	tiny := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
	}}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	reqs := strings.Repeat("GET /openapi.json HTTP/1.1\r\nHost: countersign\r\n\r\n", 64)
	for range httpMaxConns {
		c, err := tiny.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		go func() { _, _ = c.Write([]byte(reqs)) }()
	}
	// Every slot is taken by a connection whose answer is not read.
	if !wait.Until(10*time.Second, func() bool { return h.srv.httpSlots.busy() == httpMaxConns }) {
		t.Fatalf("%d of %d connections busy; the test needs them all", h.srv.httpSlots.busy(), httpMaxConns)
	}
	probe := func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: countersign\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if !wait.Until(20*time.Second, func() bool { return probe() == nil }) {
		t.Fatalf("no probe served while %d connections hold unread answers, %s after each write began", httpMaxConns, httpWriteStall)
	}
}

// TestHTTPAnswerWithoutAWriteHasADeadlineToo: an answer with no body
// written by its handler (a redirect to HEAD, a 204) is written by net/http
// after the handler returns, with no deadline of the handler's: a caller
// pipelining thousands of HEAD /console and reading nothing kept its
// connection, busy, for ever — on every one of httpMaxConns connections,
// all of them (found by a review of the write bound). That last write has
// httpWriteStall too: the stalled connection is closed.
func TestHTTPAnswerWithoutAWriteHasADeadlineToo(t *testing.T) {
	// Restored once the server and its handlers are gone (cleanups run
	// last first: start's stop the server and wait for its goroutines).
	t.Cleanup(func(d time.Duration) func() { return func() { httpWriteStall = d } }(httpWriteStall))
	httpWriteStall = time.Second
	h := start(t, pgtest.NewDatabase(t))
	tiny := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
	}}
	c, err := tiny.Dial("tcp", h.srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Far more answer bytes than the kernel buffers of a connection hold.
	reqs := strings.Repeat("HEAD /console HTTP/1.1\r\nHost: countersign\r\n\r\n", 50000)
	go func() { _, _ = c.Write([]byte(reqs)) }()
	if !wait.Until(10*time.Second, func() bool { return h.srv.httpSlots.busy() == 1 }) {
		t.Fatal("the connection never had a request in flight")
	}
	if !wait.Until(40*time.Second, func() bool { return h.srv.httpSlots.open() == 0 }) {
		t.Fatalf("the connection whose answers nobody reads is still open %s after each write began", httpWriteStall)
	}
}
