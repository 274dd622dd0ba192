package quota

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// RetryAfterKey is the response metadata key carrying the seconds to wait;
// OutgoingHeaderMatcher turns it into the REST Retry-After header.
const RetryAfterKey = "retry-after"

// forwardedForKey is the metadata grpc-gateway adds to every call it
// forwards: the client's X-Forwarded-For with the address the gateway saw
// appended last.
const forwardedForKey = "x-forwarded-for"

// maxKeyLen bounds a source key built from something that is not an address.
const maxKeyLen = 64

// PeerSource names the caller's source for per-source quotas: its IP
// address, an IPv6 caller by its /64 (one host usually holds a whole /64, so
// counting single addresses would let it rotate freely).
//
// A call from loopback or a unix socket is usually the REST gateway in this
// same process forwarding someone else's request; its source is then the
// last X-Forwarded-For entry, which the gateway itself appends from the HTTP
// peer address. A gRPC client on loopback could set that metadata itself:
// the gRPC listener is meant to be reachable only from inside the pod.
func PeerSource(ctx context.Context) string {
	host := "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if p.Addr.Network() == "unix" {
			host = "unix"
		} else if h, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			host = h
		} else {
			host = p.Addr.String()
		}
	}
	if host == "unix" || isLoopback(host) {
		if fwd := lastForwardedFor(ctx); fwd != "" {
			host = fwd
		}
	}
	return SourceKey(host)
}

func isLoopback(host string) bool {
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

func lastForwardedFor(ctx context.Context) string {
	vals := metadata.ValueFromIncomingContext(ctx, forwardedForKey)
	if len(vals) == 0 {
		return ""
	}
	last := vals[len(vals)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	return strings.TrimSpace(last)
}

// SourceKey normalises an address (with or without a port) into a quota key:
// an IPv4 address as itself, an IPv6 address as its /64 prefix, anything else
// as "host:" and at most 64 bytes of it.
func SourceKey(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		addr = h
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		if len(addr) > maxKeyLen {
			addr = addr[:maxKeyLen]
		}
		return "host:" + addr
	}
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// RetryAfterMD is the response header metadata that tells a refused caller
// when to come back.
func RetryAfterMD(d time.Duration) metadata.MD {
	return metadata.Pairs(RetryAfterKey, strconv.FormatInt(RetryAfterSeconds(d), 10))
}

// SetRetryAfter sends the retry-after header on a unary call (the error that
// follows carries the same wait as errdetails.RetryInfo).
func SetRetryAfter(ctx context.Context, d time.Duration) {
	_ = grpc.SetHeader(ctx, RetryAfterMD(d)) // only fails once headers are sent, and then there is nothing to add
}

// SetStreamRetryAfter is SetRetryAfter for a server stream.
func SetStreamRetryAfter(ss grpc.ServerStream, d time.Duration) {
	_ = ss.SetHeader(RetryAfterMD(d))
}

// OutgoingHeaderMatcher is the REST gateway's outgoing header matcher
// (runtime.WithOutgoingHeaderMatcher): retry-after becomes the standard
// Retry-After header that HTTP clients honour on a 429; every other key keeps
// the gateway's default Grpc-Metadata- prefix.
func OutgoingHeaderMatcher(key string) (string, bool) {
	if key == RetryAfterKey {
		return "Retry-After", true
	}
	return runtime.MetadataHeaderPrefix + key, true
}
