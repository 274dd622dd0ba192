package quota

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// RetryAfterKey is the response metadata key carrying the seconds to wait;
// OutgoingHeaderMatcher turns it into the REST Retry-After header.
const RetryAfterKey = "retry-after"

// maxKeyLen bounds a source key built from something that is not an address.
const maxKeyLen = 64

// LoopbackSource is the source key of every loopback address (SourceKey).
const LoopbackSource = "loopback"

// SourceKey normalises an address (with or without a port) into a quota key:
// every loopback address as one source, "loopback"; another IPv4 address as
// itself, an IPv6 address as its /64 prefix, anything else as "host:" and at
// most 64 bytes of it. Loopback is one source because any process of the
// pod can bind its socket to any of 127.0.0.0/8 before it connects (to
// Envoy's egress listener, to a TCP API listener): counted apart, each
// address would be a fresh source, and a caller that keeps failing would
// never be refused (found by a review: 40 junk credentials from 40
// loopback addresses, none refused, 40 records written).
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
	if a.IsLoopback() {
		return LoopbackSource
	}
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
