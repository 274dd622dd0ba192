// Package telemetry sets up OpenTelemetry tracing: an OTLP exporter when the
// standard OTEL_EXPORTER_OTLP_* endpoint variables ask for one, otherwise a
// no-op tracer provider that costs nothing. It also holds the helpers the
// rest of Countersign traces with (the W3C propagator, the tracer name, the
// pgx tracer). A span never changes or fails a decision: every tracing
// error is dropped here.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/metadata"
)

// InstrumentationName names Countersign's own tracer.
const InstrumentationName = "github.com/countersign/countersign"

// The environment variables that turn export on (the OpenTelemetry SDK's
// standard names; the exporters read the rest of OTEL_EXPORTER_OTLP_*).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
)

// Provider is the process's tracer provider and how to flush it.
type Provider struct {
	trace.TracerProvider
	// Exporting is true when spans leave the process (OTLP).
	Exporting bool
	shutdown  func(context.Context) error
}

// Noop is a provider that records nothing.
func Noop() *Provider {
	return &Provider{TracerProvider: noop.NewTracerProvider(), shutdown: func(context.Context) error { return nil }}
}

// Shutdown flushes the spans still buffered and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error { return p.shutdown(ctx) }

// Setup returns the tracer provider the environment asks for (getenv is
// os.LookupEnv in production): OTLP over HTTP/protobuf (the OpenTelemetry
// default) or gRPC (OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL=grpc) when an
// endpoint variable is set, unless OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none; otherwise Noop. version is the service's
// version ("" when unknown).
func Setup(ctx context.Context, getenv func(string) (string, bool), version string) (*Provider, error) {
	env := func(k string) string { v, _ := getenv(k); return strings.TrimSpace(v) }
	if env(EnvEndpoint) == "" && env(EnvTracesEndpoint) == "" {
		return Noop(), nil
	}
	if strings.EqualFold(env(envSDKDisabled), "true") || strings.EqualFold(env(envTracesExporter), "none") {
		return Noop(), nil
	}
	protocol := env(envTracesProtocol)
	if protocol == "" {
		protocol = env(envProtocol)
	}
	var exp sdktrace.SpanExporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: %s=%q: want http/protobuf or grpc", envTracesProtocol, protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{semconv.ServiceName("countersign")}
	if version != "" {
		attrs = append(attrs, semconv.ServiceVersion(version))
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the defaults.
	res, err := resource.New(ctx, resource.WithSchemaURL(semconv.SchemaURL), resource.WithAttributes(attrs...),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	// The sampler follows OTEL_TRACES_SAMPLER (default: parent-based,
	// always on).
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: tp, Exporting: true, shutdown: tp.Shutdown}, nil
}

// Propagator is the W3C trace context (traceparent, tracestate) that
// Countersign reads from Envoy and gRPC callers.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// Tracer is Countersign's tracer from tp (nil: a no-op one).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(InstrumentationName)
}

// FromHeaders continues the trace context carried in HTTP request headers
// (lower-case names, as Envoy sends them), if there is a valid one. ok is
// false when the headers carry none: ctx is returned as it was.
func FromHeaders(ctx context.Context, headers map[string]string) (context.Context, bool) {
	if headers["traceparent"] == "" {
		return ctx, false
	}
	carrier := propagation.MapCarrier{"traceparent": headers["traceparent"]}
	if ts := headers["tracestate"]; ts != "" {
		carrier["tracestate"] = ts
	}
	out := Propagator().Extract(ctx, carrier)
	sc := trace.SpanContextFromContext(out)
	if !sc.IsValid() || !sc.IsRemote() {
		return ctx, false
	}
	return out, true
}

// End records err (if any) on span and ends it.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, errorText(err))
	}
	span.End()
}

// errorText is an error's text for a span status, cut short (a driver
// error can be long). Countersign's errors name keys, intents and states,
// never a secret.
func errorText(err error) string {
	s := err.Error()
	if len(s) > 256 {
		s = s[:256]
	}
	return s
}

// FromGRPC continues the trace context a gRPC caller sent in its metadata
// (traceparent, tracestate), if there is a valid one.
func FromGRPC(ctx context.Context) (context.Context, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx, false
	}
	h := map[string]string{}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := md.Get(k); len(v) > 0 {
			h[k] = v[0]
		}
	}
	return FromHeaders(ctx, h)
}

// StartServer opens the server span of one exchange with Envoy (an
// ext_authz Check, an ext_proc stream). Its parent is the trace context of
// the HTTP request Envoy forwards, when headers carry one, else the one in
// the gRPC metadata; a different gRPC context is kept as a link.
func StartServer(ctx context.Context, tracer trace.Tracer, name string, headers map[string]string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...)}
	grpcCtx, fromGRPC := FromGRPC(ctx)
	parent, fromHTTP := FromHeaders(ctx, headers)
	switch {
	case fromHTTP:
		if g := trace.SpanContextFromContext(grpcCtx); fromGRPC && g.TraceID() != trace.SpanContextFromContext(parent).TraceID() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: g}))
		}
	case fromGRPC:
		parent = grpcCtx
	default:
		parent = ctx
	}
	return tracer.Start(parent, name, opts...)
}
