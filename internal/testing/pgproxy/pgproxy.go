// Package pgproxy is a TCP proxy for tests and benchmarks that sits between
// a PostgreSQL client and its server and counts what crosses it: client
// round trips (a burst of bytes from the client that the server answers —
// one direction flip) and the transactions the server reports ending, read
// from the wire protocol's ReadyForQuery and CommandComplete messages.
//
// It forwards bytes untouched; it only reads the server's side of the
// protocol, and stops reading (still forwarding) a connection it cannot
// follow, such as one that negotiated TLS.
package pgproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Counts is what the proxy has seen, over every connection, since Start.
type Counts struct {
	// Conns is the number of client connections accepted.
	Conns int64
	// RoundTrips counts client→server bursts the server answered: the
	// first server bytes after the client has spoken.
	RoundTrips int64
	// Commits and Rollbacks count the transactions the server reported
	// ending: an explicit block (ReadyForQuery leaving status T or E) or an
	// implicit one (statement processing — a parse, a completed or failed
	// statement — between two idle ReadyForQuery messages).
	Commits, Rollbacks int64
	// Unparsed counts connections whose protocol the proxy stopped
	// following (their transactions are not counted).
	Unparsed int64
}

// Transactions is Commits + Rollbacks.
func (c Counts) Transactions() int64 { return c.Commits + c.Rollbacks }

// Sub is c − o, field by field.
func (c Counts) Sub(o Counts) Counts {
	return Counts{Conns: c.Conns - o.Conns, RoundTrips: c.RoundTrips - o.RoundTrips,
		Commits: c.Commits - o.Commits, Rollbacks: c.Rollbacks - o.Rollbacks, Unparsed: c.Unparsed - o.Unparsed}
}

// Proxy listens on a loopback port and forwards every connection to target.
type Proxy struct {
	ln     net.Listener
	target string

	conns, roundTrips, commits, rollbacks, unparsed atomic.Int64

	mu     sync.Mutex
	open   map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Start listens on 127.0.0.1 (a free port) and forwards to target
// (host:port).
func Start(ctx context.Context, target string) (*Proxy, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, open: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Counts returns the counters now.
func (p *Proxy) Counts() Counts {
	return Counts{Conns: p.conns.Load(), RoundTrips: p.roundTrips.Load(), Commits: p.commits.Load(),
		Rollbacks: p.rollbacks.Load(), Unparsed: p.unparsed.Load()}
}

// Close stops listening, cuts every open connection and waits for the
// forwarding goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.open {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.open[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.open, c)
	p.mu.Unlock()
	_ = c.Close()
}

// dialTimeout bounds each connection to the target.
const dialTimeout = 10 * time.Second

func (p *Proxy) dial() (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	var d net.Dialer
	return d.DialContext(ctx, "tcp", p.target)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := p.dial()
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			_ = client.Close()
			_ = server.Close()
			continue
		}
		p.conns.Add(1)
		s := &session{p: p}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			s.clientToServer(client, server)
			p.untrack(server)
		}()
		go func() {
			defer p.wg.Done()
			s.serverToClient(server, client)
			p.untrack(client)
		}()
	}
}

// session is one proxied connection.
type session struct {
	p *Proxy

	mu          sync.Mutex
	clientSpoke bool // bytes went to the server since it last answered
	sslRequest  bool // the client opened with SSLRequest/GSSENCRequest: one untyped byte answers it
	first       []byte

	reader wireReader
}

// The protocol's negotiation request codes (sent instead of a
// StartupMessage, answered by one byte).
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
)

func (s *session) clientToServer(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			s.mu.Lock()
			if len(s.first) < 8 {
				s.first = append(s.first, buf[:min(n, 8-len(s.first))]...)
				if len(s.first) == 8 {
					code := binary.BigEndian.Uint32(s.first[4:8])
					s.sslRequest = binary.BigEndian.Uint32(s.first[:4]) == 8 && (code == sslRequestCode || code == gssEncRequestCode)
				}
			}
			s.clientSpoke = true
			s.mu.Unlock()
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if tcp, ok := server.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				_ = tcp.CloseWrite()
			}
			return
		}
	}
}

func (s *session) serverToClient(server, client net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			s.mu.Lock()
			if s.clientSpoke {
				s.p.roundTrips.Add(1)
				s.clientSpoke = false
			}
			ssl := s.sslRequest
			s.sslRequest = false
			s.mu.Unlock()
			s.observe(buf[:n], ssl)
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// observe feeds server bytes to the protocol reader and counts the
// transactions it reports.
func (s *session) observe(b []byte, afterNegotiation bool) {
	r := &s.reader
	if r.lost {
		return
	}
	if afterNegotiation && !r.negotiated && len(b) > 0 {
		r.negotiated = true
		if b[0] != 'N' { // 'S' or 'G': the rest is encrypted
			r.lost = true
			s.p.unparsed.Add(1)
			return
		}
		b = b[1:]
	}
	commits, rollbacks, ok := r.feed(b)
	s.p.commits.Add(commits)
	s.p.rollbacks.Add(rollbacks)
	if !ok {
		r.lost = true
		s.p.unparsed.Add(1)
	}
}

// wireReader follows the server side of the PostgreSQL protocol (each
// message: a type byte, a big-endian int32 length that counts itself, the
// payload) far enough to see transactions end.
type wireReader struct {
	negotiated bool
	lost       bool

	hdr     [5]byte
	hdrLen  int
	typ     byte
	left    int    // payload bytes still to read of the current message
	payload []byte // kept for 'C' and 'Z' only

	status  byte // last ReadyForQuery status; 'I' before the first
	worked  bool // a message of statement processing since the last ReadyForQuery
	failed  bool // an ErrorResponse since the last ReadyForQuery
	lastTag string
}

// maxKept bounds the payload kept of a CommandComplete/ReadyForQuery.
const maxKept = 64

// feed consumes b and returns the transactions that ended in it; ok is
// false when the stream is not the protocol it expects.
func (r *wireReader) feed(b []byte) (commits, rollbacks int64, ok bool) {
	if r.status == 0 {
		r.status = 'I'
	}
	for len(b) > 0 {
		if r.hdrLen < 5 {
			n := copy(r.hdr[r.hdrLen:], b)
			r.hdrLen += n
			b = b[n:]
			if r.hdrLen < 5 {
				break
			}
			r.typ = r.hdr[0]
			length := int(binary.BigEndian.Uint32(r.hdr[1:5]))
			if length < 4 || length > 1<<30 {
				return commits, rollbacks, false
			}
			r.left = length - 4
			r.payload = r.payload[:0]
		}
		n := min(r.left, len(b))
		if (r.typ == 'C' || r.typ == 'Z') && len(r.payload) < maxKept {
			r.payload = append(r.payload, b[:min(n, maxKept-len(r.payload))]...)
		}
		r.left -= n
		b = b[n:]
		if r.left > 0 {
			break
		}
		c, rb := r.message()
		commits += c
		rollbacks += rb
		r.hdrLen = 0
	}
	return commits, rollbacks, true
}

// message handles one whole message.
func (r *wireReader) message() (commits, rollbacks int64) {
	switch r.typ {
	case 'C':
		tag := r.payload
		for i, c := range tag {
			if c == 0 {
				tag = tag[:i]
				break
			}
		}
		r.worked, r.lastTag = true, string(tag)
	case 'E':
		r.failed = true
	case 'N', 'S', 'A', 'K', 'R', '3':
		// Notices, parameter status, notifications, key data,
		// authentication, and CloseComplete (closing a prepared statement
		// or portal opens no transaction): no statement ran.
	case 'Z':
		if len(r.payload) < 1 {
			return 0, 0
		}
		next := r.payload[0]
		switch {
		case next == 'I' && (r.status == 'T' || r.status == 'E'):
			// An explicit block ended: COMMIT's tag says commit; anything
			// else (ROLLBACK, COMMIT of a failed block, an error in COMMIT)
			// rolled back.
			if r.lastTag == "COMMIT" && !r.failed {
				commits++
			} else {
				rollbacks++
			}
		case next == 'I' && r.status == 'I' && r.failed:
			rollbacks++
		case next == 'I' && r.status == 'I' && r.worked:
			// PostgreSQL runs each extended-protocol cycle outside a block
			// in a transaction of its own, even one that only parses or
			// describes a statement, and counts it as a commit.
			commits++
		}
		r.status, r.worked, r.failed, r.lastTag = next, false, false, ""
	default:
		r.worked = true
	}
	return commits, rollbacks
}
