package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// The trace context of a request Countersign serves is the caller's to
// choose: the agent writes the traceparent of the HTTP request Envoy
// forwards, and of its own gRPC calls. Continued, it would let the agent
// un-sample its own decisions (flags 00 under a parent-based sampler) and
// name the trace id they are logged under. So every server span is a new
// root of Countersign's own trace, sampled by Countersign's sampler; the
// caller's trace context is only a link to it (and
// countersign.agent.trace_id), and its tracestate is never read.

// AttrAgentTraceID is the server span attribute naming the trace id the
// agent's request carried.
const AttrAgentTraceID = attribute.Key("countersign.agent.trace_id")

// TraceParent is the span context of a traceparent header (lower-case
// names, as Envoy sends them), or an invalid one. Only traceparent is read:
// tracestate (up to 32 members of the agent's choosing) is dropped.
func TraceParent(headers map[string]string) trace.SpanContext {
	tp := headers["traceparent"]
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

// grpcTraceParent is the span context of the traceparent in a gRPC
// caller's metadata, or an invalid one.
func grpcTraceParent(ctx context.Context) trace.SpanContext {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return trace.SpanContext{}
	}
	if v := md.Get("traceparent"); len(v) > 0 {
		return TraceParent(map[string]string{"traceparent": v[0]})
	}
	return trace.SpanContext{}
}

type agentTraceKey struct{}

// withAgentTrace notes sc as the trace context of the agent's request.
func withAgentTrace(ctx context.Context, sc trace.SpanContext) context.Context {
	return context.WithValue(ctx, agentTraceKey{}, sc)
}

// AgentTrace is the trace context the agent's request carried (its
// traceparent), which the request's server span links to; invalid when it
// carried none. The decision log names it beside Countersign's own trace.
func AgentTrace(ctx context.Context) trace.SpanContext {
	sc, _ := ctx.Value(agentTraceKey{}).(trace.SpanContext)
	return sc
}

// agentLink is the link to the agent's trace context and the attribute
// naming it, when sc is valid.
func agentLink(sc trace.SpanContext) (trace.Link, []attribute.KeyValue, bool) {
	if !sc.IsValid() {
		return trace.Link{}, nil, false
	}
	return trace.Link{SpanContext: sc}, []attribute.KeyValue{AttrAgentTraceID.String(sc.TraceID().String())}, true
}

// StartServer opens the server span of one exchange with Envoy (an
// ext_authz Check, an ext_proc stream): a new root. The traceparent of the
// HTTP request Envoy forwards (headers) is the agent's; it becomes a link
// and AgentTrace. The one in the gRPC metadata is Envoy's own, derived from
// the agent's when Envoy traces; it is a link too.
func StartServer(ctx context.Context, tracer trace.Tracer, name string, headers map[string]string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	agent := TraceParent(headers)
	var links []trace.Link
	if link, more, ok := agentLink(agent); ok {
		links, attrs = append(links, link), append(attrs, more...)
	}
	if envoy := grpcTraceParent(ctx); envoy.IsValid() && !envoy.Equal(agent) {
		links = append(links, trace.Link{SpanContext: envoy})
	}
	ctx = withAgentTrace(ctx, agent)
	return tracer.Start(ctx, name, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrs...), trace.WithLinks(links...))
}

// ServerHandler wraps the gRPC stats handler that opens the server span of
// each call of Countersign's API (otelgrpc's, which must extract nothing:
// NoPropagation). After it starts the span, a root, the traceparent in the
// caller's metadata becomes a link of it and AgentTrace of the call.
func ServerHandler(h stats.Handler) stats.Handler { return serverHandler{h} }

type serverHandler struct{ stats.Handler }

func (h serverHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	agent := grpcTraceParent(ctx)
	ctx = h.Handler.TagRPC(withAgentTrace(ctx, agent), info)
	if link, attrs, ok := agentLink(agent); ok {
		span := trace.SpanFromContext(ctx)
		span.AddLink(link)
		span.SetAttributes(attrs...)
	}
	return ctx
}

// NoPropagation extracts no trace context: an API call's span is never a
// child of the caller's (ServerHandler links it instead).
func NoPropagation() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator()
}
