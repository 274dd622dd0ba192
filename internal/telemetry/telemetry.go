// Package telemetry sets up OpenTelemetry tracing: an OTLP exporter when the
// standard OTEL_EXPORTER_OTLP_* endpoint variables ask for one, otherwise a
// no-op tracer provider that costs nothing. It also holds the helpers the
// rest of Countersign traces with (the server spans of the agent's
// requests, the tracer name, the pgx tracer). A span never changes or fails
// a decision: every tracing error is dropped here.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// InstrumentationName names Countersign's own tracer.
const InstrumentationName = "github.com/countersign/countersign"

// The environment variables that turn export on (the OpenTelemetry SDK's
// standard names; the exporters read the rest of OTEL_EXPORTER_OTLP_*).
const (
	EnvEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol  = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envSDKDisabled     = "OTEL_SDK_DISABLED"
	envTracesExporter  = "OTEL_TRACES_EXPORTER"
	envSpanValueLength = "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"
	envValueLength     = "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"
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
	// always on). Its parent is never the agent's: a server span is a root
	// (StartServer, ServerHandler), so the agent cannot un-sample its own
	// decisions.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithRawSpanLimits(spanLimits(env)))
	return &Provider{TracerProvider: tp, Exporting: true, shutdown: tp.Shutdown}, nil
}

// MaxAttributeChars is the longest attribute value a span keeps, in
// characters (the SDK cuts at character boundaries: at most 4 KiB of
// UTF-8), unless OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT or
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT names another (the SDK's own default is
// no limit).
const MaxAttributeChars = 1024

// spanLimits are the SDK's (its defaults, or the OTEL_SPAN_*_LIMIT
// variables: at most 128 attributes, events and links a span), with
// attribute values cut to MaxAttributeChars. Whatever an agent's request
// puts into a span, a batch of spans waiting for a slow collector stays a
// bounded amount of memory. The value limit is read here, through env,
// rather than left to the SDK (which reads the process's environment and
// takes a value it cannot parse for no limit at all): a number of 0 or
// more is the limit, -1 (spelled so) is the operator's explicit choice of
// none, and anything else keeps MaxAttributeChars.
func spanLimits(env func(string) string) sdktrace.SpanLimits {
	limits := sdktrace.NewSpanLimits()
	limits.AttributeValueLengthLimit = MaxAttributeChars
	for _, name := range []string{envSpanValueLength, envValueLength} { // the span-specific one wins
		v := strings.TrimSpace(env(name))
		if v == "" {
			continue
		}
		if n, err := strconv.Atoi(v); err == nil && n >= -1 {
			limits.AttributeValueLengthLimit = n
		}
		break
	}
	return limits
}

// Tracer is Countersign's tracer from tp (nil: a no-op one).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(InstrumentationName)
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
