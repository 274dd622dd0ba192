package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestSetupExportsOnlyWhenAnEndpointIsSet(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		exporting bool
		wantErr   bool
	}{
		{"nothing set", nil, false, false},
		{"endpoint", map[string]string{EnvEndpoint: "http://127.0.0.1:4318"}, true, false},
		{"traces endpoint over gRPC", map[string]string{EnvTracesEndpoint: "http://127.0.0.1:4317", envProtocol: "grpc"}, true, false},
		{"SDK disabled", map[string]string{EnvEndpoint: "http://127.0.0.1:4318", envSDKDisabled: "true"}, false, false},
		{"exporter none", map[string]string{EnvEndpoint: "http://127.0.0.1:4318", envTracesExporter: "none"}, false, false},
		{"unknown protocol", map[string]string{EnvEndpoint: "http://127.0.0.1:4318", envTracesProtocol: "carrier-pigeon"}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Setup(context.Background(), env(tc.env), "test")
			if tc.wantErr {
				if err == nil {
					t.Fatal("Setup accepted it")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				// No collector listens: the flush fails, quickly.
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				_ = p.Shutdown(ctx)
			}()
			if p.Exporting != tc.exporting {
				t.Fatalf("Exporting = %v, want %v", p.Exporting, tc.exporting)
			}
			_, span := Tracer(p).Start(context.Background(), "x")
			if span.IsRecording() != tc.exporting {
				t.Fatalf("span recording = %v, want %v", span.IsRecording(), tc.exporting)
			}
			span.End()
		})
	}
}

func TestFromHeadersContinuesOnlyAValidTraceparent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name    string
		headers map[string]string
		ok      bool
	}{
		{"valid", map[string]string{"traceparent": tp, "tracestate": "vendor=x"}, true},
		{"none", map[string]string{}, false},
		{"malformed", map[string]string{"traceparent": "00-zz-yy-01"}, false},
		{"all-zero trace id", map[string]string{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, ok := FromHeaders(context.Background(), tc.headers)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			sc := trace.SpanContextFromContext(ctx)
			if ok && (sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.TraceState().Get("vendor") != "x") {
				t.Fatalf("continued %s %s", sc.TraceID(), sc.TraceState())
			}
			if !ok && sc.IsValid() {
				t.Fatal("a context without a valid traceparent carries a span context")
			}
		})
	}
	md := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", tp))
	if ctx, ok := FromGRPC(md); !ok || trace.SpanContextFromContext(ctx).SpanID().String() != "00f067aa0ba902b7" {
		t.Fatal("FromGRPC did not continue the metadata's traceparent")
	}
}

func TestOperation(t *testing.T) {
	for sql, want := range map[string]string{
		"SELECT 1":                             "SELECT",
		"  insert into x values ($1)":          "INSERT",
		"WITH a AS (SELECT 1) SELECT * FROM a": "WITH",
		"-- why\nUPDATE t SET a = 1":           "UPDATE",
		"BEGIN; SET LOCAL x = on":              "BEGIN",
		"":                                     "SQL",
		"-- only a comment":                    "SQL",
	} {
		if got := operation(sql); got != want {
			t.Errorf("operation(%q) = %q, want %q", sql, got, want)
		}
	}
}

// TestSetupExportsOverOTLPAndFlushesOnShutdown: with the standard endpoint
// variable set, a span reaches the collector by the time Shutdown returns.
func TestSetupExportsOverOTLPAndFlushesOnShutdown(t *testing.T) {
	got := make(chan string, 4)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- r.URL.Path + " " + string(body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv(EnvEndpoint, collector.URL)
	t.Setenv(envProtocol, "http/protobuf")
	p, err := Setup(context.Background(), os.LookupEnv, "test")
	if err != nil || !p.Exporting {
		t.Fatalf("Setup = %v, %v; want exporting", p, err)
	}
	_, span := Tracer(p).Start(context.Background(), "countersign.decide")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case req := <-got:
		if !strings.HasPrefix(req, "/v1/traces ") || !strings.Contains(req, "countersign.decide") || !strings.Contains(req, "countersign") {
			t.Fatalf("collector got %q", req)
		}
	default:
		t.Fatal("Shutdown returned before the span was exported")
	}
}
