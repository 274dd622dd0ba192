package quota

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Who a caller is, for a per-source quota, is decided only from what a
// component Countersign trusts observed, never from what the caller says:
//
//   - a gRPC call's source is the address of the connection it arrived on;
//   - a REST call is forwarded by Countersign's own gateway over an
//     in-process connection (GatewayListener), so its source is the HTTP
//     peer address the gateway reports with it (GatewayPeerKey). The same
//     keys, or x-forwarded-for, on any other connection are ignored: a
//     client of the gRPC listener can send any metadata it likes;
//   - a forwarding header (X-Forwarded-For on REST, x-forwarded-for on
//     gRPC) is read only when the address it arrived from is one of the
//     operator's trusted proxies (--trusted-proxies, none by default), and
//     then only as far back as trusted proxies vouch for it: walking it
//     from the right, the first address that is not a trusted proxy is the
//     source. What a client put further left is never reached;
//   - on ext_authz the source is Envoy's view of the downstream
//     connection's address (extauthz), which Envoy takes from the socket,
//     not from a header.
//
// So a caller cannot spread its failures across invented sources, nor
// charge them to another real source: it is counted where it connects from.

// Metadata the REST gateway attaches to every call it forwards
// (Peers.GatewayMetadata). They are believed only on a GatewayListener
// connection.
const (
	// GatewayPeerKey is the HTTP peer's address, as the gateway's socket saw it.
	GatewayPeerKey = "countersign-gateway-peer"
	// GatewayForwardedKey is the X-Forwarded-For the HTTP peer sent, passed
	// on only when the peer is a trusted proxy (empty otherwise).
	GatewayForwardedKey = "countersign-gateway-forwarded-for"
)

// forwardedForKey is the forwarding metadata a gRPC proxy adds.
const forwardedForKey = "x-forwarded-for"

// maxHops bounds how far back a forwarding chain is walked.
const maxHops = 16

// Peers names callers' sources for per-source quotas. The zero value
// trusts no proxy: every forwarding header is ignored.
type Peers struct {
	// TrustedProxies are the networks of proxies whose forwarding headers
	// are believed.
	TrustedProxies []netip.Prefix
}

// PeerSource is Peers{}.Source: the source of a call, trusting no proxy.
func PeerSource(ctx context.Context) string { return Peers{}.Source(ctx) }

// Source is the quota key of the caller of a gRPC call (see SourceKey).
func (p Peers) Source(ctx context.Context) string {
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.Addr == nil {
		return SourceKey("unknown")
	}
	if _, gw := pr.Addr.(GatewayAddr); gw {
		hop := onlyValue(ctx, GatewayPeerKey)
		if hop == "" {
			return SourceKey("gateway-unknown")
		}
		return SourceKey(p.resolve(hop, metadata.ValueFromIncomingContext(ctx, GatewayForwardedKey)))
	}
	if pr.Addr.Network() == "unix" {
		// A Unix socket has no address, and nothing on it is a proxy.
		return SourceKey("unix")
	}
	return SourceKey(p.resolve(pr.Addr.String(), metadata.ValueFromIncomingContext(ctx, forwardedForKey)))
}

// HTTPSource is the quota key of the caller of a plain HTTP request served
// by this process (the console's sign-in): the socket's peer address, or,
// when that peer is a trusted proxy, what trusted proxies vouch for in
// X-Forwarded-For, as Source does for a gRPC call.
func (p Peers) HTTPSource(r *http.Request) string {
	var chain []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		if printable(v) {
			chain = append(chain, v)
		}
	}
	hop := r.RemoteAddr
	if hop == "" || !printable(hop) {
		return SourceKey("unknown")
	}
	return SourceKey(p.resolve(hop, chain))
}

// GatewayMetadata is the REST gateway's metadata annotator
// (runtime.WithMetadata): the HTTP peer's address, and its X-Forwarded-For
// when that peer is a trusted proxy. The gateway's annotations replace any
// value a client managed to send under the same keys.
func (p Peers) GatewayMetadata(_ context.Context, r *http.Request) metadata.MD {
	fwd := ""
	if a, ok := parseHop(r.RemoteAddr); ok && p.trusted(a) {
		var vals []string
		for _, v := range r.Header.Values("X-Forwarded-For") {
			if printable(v) {
				vals = append(vals, v)
			}
		}
		fwd = strings.Join(vals, ", ")
	}
	peerAddr := r.RemoteAddr
	if !printable(peerAddr) {
		peerAddr = ""
	}
	return metadata.Pairs(GatewayPeerKey, peerAddr, GatewayForwardedKey, fwd)
}

// resolve is the source of a call that arrived from hop carrying the
// forwarding chain: hop itself unless it is a trusted proxy; otherwise,
// from the right of the chain, the first address that is not. An entry
// that is not an address stops the walk at the proxy that passed it on.
func (p Peers) resolve(hop string, chain []string) string {
	a, ok := parseHop(hop)
	if !ok {
		return hop
	}
	if !p.trusted(a) {
		return a.String()
	}
	var entries []string
	for _, v := range chain {
		entries = append(entries, strings.Split(v, ",")...)
	}
	for i := len(entries) - 1; i >= 0 && i >= len(entries)-maxHops; i-- {
		b, ok := parseHop(strings.TrimSpace(entries[i]))
		if !ok {
			break
		}
		a = b
		if !p.trusted(a) {
			break
		}
	}
	return a.String()
}

func (p Peers) trusted(a netip.Addr) bool {
	for _, n := range p.TrustedProxies {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop reads an address with or without a port.
func parseHop(s string) (netip.Addr, bool) {
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// onlyValue is key's value when the call carries exactly one.
func onlyValue(ctx context.Context, key string) string {
	vals := metadata.ValueFromIncomingContext(ctx, key)
	if len(vals) != 1 {
		return ""
	}
	return vals[0]
}

// printable reports whether v can be sent as gRPC metadata text.
func printable(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}
