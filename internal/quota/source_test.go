package quota_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/countersign/countersign/internal/quota"
)

func TestPeersSource(t *testing.T) {
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	unix := &net.UnixAddr{Name: "/run/cs.sock", Net: "unix"}
	gw := quota.GatewayAddr{}
	none := quota.Peers{}
	proxies := quota.Peers{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}}
	xff := func(v ...string) []string {
		var kv []string
		for _, s := range v {
			kv = append(kv, "x-forwarded-for", s)
		}
		return kv
	}
	tests := []struct {
		name  string
		peers quota.Peers
		addr  net.Addr
		md    []string // metadata pairs
		want  string
	}{
		{"remote peer", none, tcp("198.51.100.4:40000"), nil, "198.51.100.4"},
		{"a remote peer cannot claim another source", none, tcp("198.51.100.4:40000"), xff("192.0.2.1"), "198.51.100.4"},
		// Before: a client on loopback was taken for the gateway, and its
		// x-forwarded-for believed.
		{"a gRPC client on loopback cannot claim another source", none, tcp("127.0.0.1:50000"), xff("192.0.2.1"), quota.LoopbackSource},
		{"nor invent one per call", none, tcp("127.0.0.1:50001"), xff("6.6.6.6, 7.7.7.7", "8.8.8.8"), quota.LoopbackSource},
		{"nor pose as the gateway by its metadata", none, tcp("127.0.0.1:50000"), []string{quota.GatewayPeerKey, "192.0.2.1:1"}, quota.LoopbackSource},
		// Any process of the pod may bind any of 127.0.0.0/8: one source.
		{"nor invent one per loopback address", none, tcp("127.0.3.9:50000"), nil, quota.LoopbackSource},
		{"IPv6 loopback", none, tcp("[::1]:50000"), xff("2001:db8::1"), quota.LoopbackSource},
		{"unix socket ignores forwarding", none, unix, xff("192.0.2.2"), "host:unix"},
		{"the gateway reports the HTTP peer", none, gw, []string{quota.GatewayPeerKey, "192.0.2.1:5555"}, "192.0.2.1"},
		{"the gateway's own key, never x-forwarded-for", none, gw, append(xff("6.6.6.6"), quota.GatewayPeerKey, "192.0.2.1:5555"), "192.0.2.1"},
		{"a forwarded chain from an untrusted HTTP peer is ignored", none, gw,
			[]string{quota.GatewayPeerKey, "192.0.2.1:5555", quota.GatewayForwardedKey, "6.6.6.6"}, "192.0.2.1"},
		{"gateway call without its peer", none, gw, nil, "host:gateway-unknown"},
		{"gateway call with two peers", none, gw, []string{quota.GatewayPeerKey, "192.0.2.1:1", quota.GatewayPeerKey, "192.0.2.2:1"}, "host:gateway-unknown"},
		{"no peer", none, nil, nil, "host:unknown"},

		{"a trusted proxy's client", proxies, tcp("10.0.0.5:443"), xff("192.0.2.9"), "192.0.2.9"},
		{"what the client wrote left of it is never reached", proxies, tcp("10.0.0.5:443"), xff("6.6.6.6, 192.0.2.9"), "192.0.2.9"},
		{"two trusted proxies", proxies, tcp("10.0.0.5:443"), xff("6.6.6.6, 192.0.2.9, 10.1.1.1"), "192.0.2.9"},
		{"values joined in order", proxies, tcp("10.0.0.5:443"), xff("6.6.6.6", "192.0.2.9:7000"), "192.0.2.9"},
		{"only trusted proxies: the farthest", proxies, tcp("10.0.0.5:443"), xff("10.2.2.2, 10.1.1.1"), "10.2.2.2"},
		{"garbage stops at the proxy that passed it", proxies, tcp("10.0.0.5:443"), xff("192.0.2.9, evil"), "10.0.0.5"},
		{"a trusted proxy without a header is the source", proxies, tcp("10.0.0.5:443"), nil, "10.0.0.5"},
		{"an untrusted peer's header is ignored", proxies, tcp("198.51.100.4:1"), xff("192.0.2.9"), "198.51.100.4"},
		{"IPv6 client of an IPv6 proxy", proxies, tcp("[fd00::5]:443"), xff("2001:db8:7:7::1"), "2001:db8:7:7::/64"},
		{"the gateway behind a trusted proxy", proxies, gw,
			[]string{quota.GatewayPeerKey, "10.0.0.5:443", quota.GatewayForwardedKey, "6.6.6.6, 192.0.2.9"}, "192.0.2.9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.addr != nil {
				ctx = peer.NewContext(ctx, &peer.Peer{Addr: tc.addr})
			}
			if tc.md != nil {
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(tc.md...))
			}
			if got := tc.peers.Source(ctx); got != tc.want {
				t.Fatalf("Source = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestGatewayMetadata(t *testing.T) {
	proxies := quota.Peers{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	tests := []struct {
		name      string
		peers     quota.Peers
		remote    string
		xff       []string
		peer, fwd string
	}{
		{"untrusted peer: its header is not passed on", quota.Peers{}, "192.0.2.1:5555", []string{"6.6.6.6"}, "192.0.2.1:5555", ""},
		{"trusted proxy: its header is passed on", proxies, "10.0.0.5:443", []string{"6.6.6.6", "192.0.2.9"}, "10.0.0.5:443", "6.6.6.6, 192.0.2.9"},
		{"unprintable values are dropped", proxies, "10.0.0.5:443", []string{"192.0.2.9\x7f", "192.0.2.8"}, "10.0.0.5:443", "192.0.2.8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/v1/agents", nil)
			r.RemoteAddr = tc.remote
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			md := tc.peers.GatewayMetadata(context.Background(), r)
			if got := md.Get(quota.GatewayPeerKey); len(got) != 1 || got[0] != tc.peer {
				t.Fatalf("peer = %q, want %q", got, tc.peer)
			}
			// Always set, so that it replaces anything a client sent.
			if got := md.Get(quota.GatewayForwardedKey); len(got) != 1 || got[0] != tc.fwd {
				t.Fatalf("forwarded = %q, want %q", got, tc.fwd)
			}
		})
	}
}

func TestGatewayListener(t *testing.T) {
	l := quota.NewGatewayListener()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := l.DialContext(ctx, "ignored")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	defer s.Close()
	if _, ok := s.RemoteAddr().(quota.GatewayAddr); !ok {
		t.Fatalf("accepted connection's peer is %T, want GatewayAddr", s.RemoteAddr())
	}
	go func() { _, _ = c.Write([]byte("ping")) }()
	buf := make([]byte, 4)
	if _, err := s.Read(buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v", err)
	}
	if _, err := l.DialContext(ctx, ""); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Dial after Close = %v", err)
	}
}

// TestPeersHTTPSource: a plain HTTP request's source is its socket peer; a
// forwarding header counts only from a trusted proxy.
func TestPeersHTTPSource(t *testing.T) {
	proxies := quota.Peers{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, tc := range []struct {
		name   string
		peers  quota.Peers
		remote string
		xff    []string
		want   string
	}{
		{"peer", quota.Peers{}, "198.51.100.4:40000", nil, quota.SourceKey("198.51.100.4")},
		{"peer cannot claim another source", quota.Peers{}, "127.0.0.1:40000", []string{"192.0.2.1"}, quota.SourceKey("127.0.0.1")},
		{"trusted proxy vouches", proxies, "10.1.2.3:40000", []string{"192.0.2.1"}, quota.SourceKey("192.0.2.1")},
		{"only as far as proxies vouch", proxies, "10.1.2.3:40000", []string{"203.0.113.9, 192.0.2.1"}, quota.SourceKey("192.0.2.1")},
		{"no peer", quota.Peers{}, "", nil, quota.SourceKey("unknown")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/console/api/session", nil)
			r.RemoteAddr = tc.remote
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := tc.peers.HTTPSource(r); got != tc.want {
				t.Fatalf("HTTPSource = %q, want %q", got, tc.want)
			}
		})
	}
}
