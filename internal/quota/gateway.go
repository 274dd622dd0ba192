package quota

import (
	"context"
	"net"
	"sync"
)

// GatewayListener is the REST gateway's private way into the gRPC server: a
// listener of in-memory connections that only this process can open (there
// is no address to dial, on any network). A call arriving on one of them was
// made by Countersign's own gateway, so the HTTP peer the gateway reports
// with it can be believed; see Peers.Source.
//
// This is why no shared secret is needed: trust comes from the transport,
// which a caller outside the process cannot reach, not from a value it
// might learn or guess.
type GatewayListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewGatewayListener returns an open in-process listener.
func NewGatewayListener() *GatewayListener {
	return &GatewayListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the gateway's next connection.
func (l *GatewayListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and DialContext; open connections stay open until
// their server closes them.
func (l *GatewayListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the listener's (unreachable) address.
func (l *GatewayListener) Addr() net.Addr { return GatewayAddr{} }

// DialContext opens a connection to the listener: the gateway's gRPC
// client dialer (grpc.WithContextDialer); the target is ignored.
func (l *GatewayListener) DialContext(ctx context.Context, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- gatewayConn{server}:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
	}
	_ = client.Close()
	_ = server.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, net.ErrClosed
}

// GatewayAddr is the address of both ends of a GatewayListener connection.
// Only a connection accepted from a GatewayListener carries it.
type GatewayAddr struct{}

// Network names the in-process transport.
func (GatewayAddr) Network() string { return "countersign-gateway" }

func (GatewayAddr) String() string { return "countersign-gateway" }

// gatewayConn is the server's end of a gateway connection.
type gatewayConn struct{ net.Conn }

func (gatewayConn) RemoteAddr() net.Addr { return GatewayAddr{} }
func (gatewayConn) LocalAddr() net.Addr  { return GatewayAddr{} }
