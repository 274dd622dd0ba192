package telemetry

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
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

func TestTraceParentReadsOnlyAValidTraceparent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name    string
		headers map[string]string
		valid   bool
	}{
		{"valid", map[string]string{"traceparent": tp, "tracestate": "vendor=x"}, true},
		{"unsampled", map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}, true},
		{"none", map[string]string{}, false},
		{"tracestate alone", map[string]string{"tracestate": "vendor=x"}, false},
		{"malformed", map[string]string{"traceparent": "00-zz-yy-01"}, false},
		{"all-zero trace id", map[string]string{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := TraceParent(tc.headers)
			if sc.IsValid() != tc.valid {
				t.Fatalf("valid = %v, want %v", sc.IsValid(), tc.valid)
			}
			if tc.valid && (sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7") {
				t.Fatalf("read %s/%s", sc.TraceID(), sc.SpanID())
			}
			if sc.TraceState().Len() != 0 {
				t.Fatalf("the agent's tracestate was kept: %s", sc.TraceState())
			}
		})
	}
}

// recorder is a tracer provider sampling as Setup's does by default
// (parent-based, always on) into memory.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// TestStartServerLinksButNeverContinuesTheAgentsTrace: Envoy's exchanges
// are roots of Countersign's own traces, sampled by its own sampler
// whatever the agent's traceparent says; the agent's trace context (and
// Envoy's) is a link, its tracestate dropped.
func TestStartServerLinksButNeverContinuesTheAgentsTrace(t *testing.T) {
	const (
		agentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		agentSpan  = "00f067aa0ba902b7"
		envoyTP    = "00-0af7651916cd43dd8448eb211c80319c-b9c7c989f97918e1-00"
	)
	tests := []struct {
		name      string
		headers   map[string]string
		grpc      metadata.MD
		wantAgent bool
		wantLinks []string // span ids
	}{
		{"none", nil, nil, false, nil},
		{"agent's traceparent, unsampled, with tracestate",
			map[string]string{"traceparent": "00-" + agentTrace + "-" + agentSpan + "-00", "tracestate": "a=" + strings.Repeat("x", 200)},
			nil, true, []string{agentSpan}},
		{"agent's and Envoy's", map[string]string{"traceparent": "00-" + agentTrace + "-" + agentSpan + "-01"},
			metadata.Pairs("traceparent", envoyTP, "tracestate", "b=y"), true, []string{agentSpan, "b9c7c989f97918e1"}},
		{"Envoy's alone", nil, metadata.Pairs("traceparent", envoyTP), false, []string{"b9c7c989f97918e1"}},
		{"the same in both", map[string]string{"traceparent": "00-" + agentTrace + "-" + agentSpan + "-01"},
			metadata.Pairs("traceparent", "00-"+agentTrace+"-"+agentSpan+"-01"), true, []string{agentSpan}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp, exp := recorder(t)
			ctx := context.Background()
			if tc.grpc != nil {
				ctx = metadata.NewIncomingContext(ctx, tc.grpc)
			}
			ctx, span := StartServer(ctx, Tracer(tp), "ext_authz.Check", tc.headers)
			if got := AgentTrace(ctx); got.IsValid() != tc.wantAgent || tc.wantAgent && got.TraceID().String() != agentTrace {
				t.Errorf("AgentTrace = %v, want the agent's: %v", got.TraceID(), tc.wantAgent)
			}
			_, child := Tracer(tp).Start(ctx, "countersign.decide")
			child.End()
			span.End()
			spans := exp.GetSpans()
			if len(spans) != 2 {
				t.Fatalf("%d spans exported, want the server span and its child", len(spans))
			}
			server, decide := spans[1], spans[0]
			if server.Parent.IsValid() || server.SpanContext.TraceID().String() == agentTrace || server.SpanContext.TraceState().Len() != 0 {
				t.Errorf("server span %s (parent %v, tracestate %q): want a root of a trace of Countersign's",
					server.SpanContext.TraceID(), server.Parent.SpanID(), server.SpanContext.TraceState())
			}
			if decide.Parent.SpanID() != server.SpanContext.SpanID() {
				t.Errorf("the decision's parent is %s, want the server span", decide.Parent.SpanID())
			}
			var links []string
			for _, l := range server.Links {
				links = append(links, l.SpanContext.SpanID().String())
				if l.SpanContext.TraceState().Len() != 0 {
					t.Errorf("link %s keeps the tracestate %q", l.SpanContext.SpanID(), l.SpanContext.TraceState())
				}
			}
			if strings.Join(links, ",") != strings.Join(tc.wantLinks, ",") {
				t.Errorf("links %v, want %v", links, tc.wantLinks)
			}
			var attr string
			for _, kv := range server.Attributes {
				if kv.Key == AttrAgentTraceID {
					attr = kv.Value.AsString()
				}
			}
			if want := map[bool]string{true: agentTrace}[tc.wantAgent]; attr != want {
				t.Errorf("%s = %q, want %q", AttrAgentTraceID, attr, want)
			}
		})
	}
}

// TestServerHandlerLinksTheCallersTrace: an API call's span (otelgrpc's)
// is a root, sampled whatever the caller's traceparent says, linked to it.
func TestServerHandlerLinksTheCallersTrace(t *testing.T) {
	tp, exp := recorder(t)
	h := ServerHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(NoPropagation()), otelgrpc.WithPublicEndpoint()))
	ctx := metadata.NewIncomingContext(context.Background(),
		metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "tracestate", "a=b"))
	ctx = h.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: "/countersign.v1.DecisionService/Decide"})
	if AgentTrace(ctx).TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("AgentTrace = %s", AgentTrace(ctx).TraceID())
	}
	h.HandleRPC(ctx, &stats.End{})
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans: an unsampled traceparent un-sampled the call", len(spans))
	}
	sp := spans[0]
	if sp.Parent.IsValid() || sp.SpanContext.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("the call's span continues the caller's trace (parent %s)", sp.Parent.SpanID())
	}
	if len(sp.Links) != 1 || sp.Links[0].SpanContext.SpanID().String() != "00f067aa0ba902b7" || sp.Links[0].SpanContext.TraceState().Len() != 0 {
		t.Errorf("links %v, want the caller's span without its tracestate", sp.Links)
	}
}

// TestSetupBoundsAttributeValues: an attribute quoting 10 KiB of the
// agent's request is kept to MaxAttributeChars characters (4-byte ones
// too: the cut counts characters), unless the standard variable names
// another number; a value that is not one keeps the bound (the SDK alone
// took it for no limit: found by a review).
func TestSetupBoundsAttributeValues(t *testing.T) {
	endpoint := map[string]string{EnvEndpoint: "http://127.0.0.1:4318"}
	with := func(k, v string) map[string]string { m := maps.Clone(endpoint); m[k] = v; return m }
	for _, tc := range []struct {
		name  string
		env   map[string]string
		value string
		want  int // characters kept
	}{
		{"default", endpoint, strings.Repeat("a", 10<<10), MaxAttributeChars},
		{"default, 4-byte characters", endpoint, strings.Repeat("😀", 10<<10), MaxAttributeChars},
		{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", with(envSpanValueLength, "4096"), strings.Repeat("a", 10<<10), 4096},
		{"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", with(envValueLength, "2000"), strings.Repeat("a", 10<<10), 2000},
		{"not a number", with(envSpanValueLength, "1KiB"), strings.Repeat("a", 10<<10), MaxAttributeChars},
		{"below -1", with(envValueLength, "-5"), strings.Repeat("a", 10<<10), MaxAttributeChars},
		{"-1: none, the operator's choice", with(envSpanValueLength, "-1"), strings.Repeat("a", 10<<10), 10 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The SDK reads the process's environment: give it the same
			// values, so that a limit it applied itself would show.
			for _, k := range []string{envSpanValueLength, envValueLength} {
				t.Setenv(k, tc.env[k])
			}
			p, err := Setup(context.Background(), env(tc.env), "test")
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				_ = p.Shutdown(ctx)
			}()
			_, span := Tracer(p).Start(context.Background(), "x", trace.WithAttributes(attribute.String("url.path", tc.value)))
			defer span.End()
			ro, ok := span.(sdktrace.ReadOnlySpan)
			if !ok {
				t.Fatalf("%T is not an SDK span", span)
			}
			kept := ro.Attributes()[0].Value.AsString()
			if got := utf8.RuneCountInString(kept); got != tc.want || !utf8.ValidString(kept) {
				t.Fatalf("a %d-character attribute kept %d characters (valid UTF-8: %v), want %d", utf8.RuneCountInString(tc.value), got, utf8.ValidString(kept), tc.want)
			}
		})
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
