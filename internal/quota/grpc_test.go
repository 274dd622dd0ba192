package quota_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/countersign/countersign/internal/api"
	"github.com/countersign/countersign/internal/quota"
)

func TestSourceKey(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"IPv4", "203.0.113.7", "203.0.113.7"},
		{"IPv4 with port", "203.0.113.7:5555", "203.0.113.7"},
		{"IPv4-mapped IPv6", "::ffff:203.0.113.7", "203.0.113.7"},
		{"IPv6 by its /64", "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{"IPv6 with port, same /64", "[2001:db8:1:2::9]:443", "2001:db8:1:2::/64"},
		{"IPv6 zone dropped", "fe80::1%eth0", "fe80::/64"},
		{"every loopback address is one source", "127.45.6.7:9", quota.LoopbackSource},
		{"IPv4 loopback mapped", "[::ffff:127.0.0.2]:1", quota.LoopbackSource},
		{"IPv6 loopback", "::1", quota.LoopbackSource},
		{"not an address", "gateway.local", "host:gateway.local"},
		{"long garbage is cut", strings.Repeat("x", 500), "host:" + strings.Repeat("x", 64)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := quota.SourceKey(tc.in); got != tc.want {
				t.Fatalf("SourceKey(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// A quota refusal reaches a REST client as 429 with Retry-After, and a gRPC
// client as RESOURCE_EXHAUSTED with RetryInfo and the same reason.
func TestExhaustionIs429WithRetryAfter(t *testing.T) {
	err := api.ToStatus(&quota.ExhaustedError{Scope: "source", RetryAfter: 2500 * time.Millisecond})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("code = %v, want ResourceExhausted", st.Code())
	}
	var reason string
	var delay time.Duration
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.RetryInfo:
			delay = d.GetRetryDelay().AsDuration()
		}
	}
	if reason != "RATE_LIMITED" || delay != 2500*time.Millisecond {
		t.Fatalf("details: reason %q, retry %v; want RATE_LIMITED, 2.5s", reason, delay)
	}

	mux := runtime.NewServeMux(runtime.WithOutgoingHeaderMatcher(quota.OutgoingHeaderMatcher))
	ctx := runtime.NewServerMetadataContext(context.Background(), runtime.ServerMetadata{
		HeaderMD: quota.RetryAfterMD(2500 * time.Millisecond),
	})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/agents", nil)
	runtime.HTTPError(ctx, mux, &runtime.JSONPb{}, rec, req, err)
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("HTTP status = %d, want 429", rec.Code)
	}
	if got := rec.Header().Get("Retry-After"); got != "3" {
		t.Fatalf("Retry-After = %q, want \"3\" (2.5s rounded up)", got)
	}
	if !strings.Contains(rec.Body.String(), "RATE_LIMITED") {
		t.Fatalf("REST body lacks the reason: %s", rec.Body.String())
	}
}

func TestOutgoingHeaderMatcherKeepsTheDefaultForOtherKeys(t *testing.T) {
	if h, ok := quota.OutgoingHeaderMatcher("x-request-id"); !ok || h != "Grpc-Metadata-x-request-id" {
		t.Fatalf("x-request-id -> %q, %v", h, ok)
	}
}
