package telemetry

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
)

var lowerHex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

// FuzzTraceParent: a traceparent is the agent's to write. Reading one never
// panics, an accepted trace id is 32 lower-case hex digits (what the
// decision log's agent_trace_id then carries), and tracestate is never
// read, from a header map or from gRPC metadata.
func FuzzTraceParent(f *testing.F) {
	for _, s := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"ff-" + strings.Repeat("a", 32) + "-" + strings.Repeat("b", 16) + "-00",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-\n{\"x\":1}",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
		"", "\x00", "-",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tp string) {
		sc := TraceParent(map[string]string{"traceparent": tp, "tracestate": "a=b"})
		if sc.IsValid() && !lowerHex32.MatchString(sc.TraceID().String()) {
			t.Fatalf("accepted trace id %q from %q", sc.TraceID().String(), tp)
		}
		if sc.TraceState().Len() != 0 {
			t.Fatalf("tracestate read: %v", sc.TraceState())
		}
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", tp, "tracestate", "a=b"))
		g := grpcTraceParent(ctx)
		if g.IsValid() && !lowerHex32.MatchString(g.TraceID().String()) {
			t.Fatalf("accepted trace id %q from gRPC metadata %q", g.TraceID().String(), tp)
		}
		if g.TraceState().Len() != 0 {
			t.Fatalf("tracestate read from gRPC metadata: %v", g.TraceState())
		}
	})
}
