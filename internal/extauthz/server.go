package extauthz

import (
	"context"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/telemetry"
)

// Decider is the engine as the ext_authz server uses it.
type Decider interface {
	Decide(ctx context.Context, req engine.Request) engine.Outcome
}

// Server implements envoy.service.auth.v3.Authorization.
type Server struct {
	authv3.UnimplementedAuthorizationServer
	decider Decider
	maxBody int
	tracer  trace.Tracer
}

// NewServer returns an ext_authz server over d. maxBody is Envoy's
// with_request_body.max_request_bytes (see BodyIsWhole).
func NewServer(d Decider, maxBody int) *Server {
	return &Server{decider: d, maxBody: maxBody, tracer: telemetry.Tracer(nil)}
}

// WithTracing traces each Check under tp, in a trace of its own linked to
// the one the HTTP request Envoy asks about names (its traceparent header,
// the agent's to write).
func (s *Server) WithTracing(tp trace.TracerProvider) *Server {
	s.tracer = telemetry.Tracer(tp)
	return s
}

// Check answers one Envoy authorization request. It never returns an error:
// a cancelled context or an internal failure is a deny the engine produced.
// An allowed attempt carries the digest of the body it was decided on, so
// ext_proc can refuse any other body (A2).
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	r := FromCheckRequest(req, s.maxBody)
	ctx, span := telemetry.StartServer(ctx, s.tracer, "ext_authz.Check", r.Headers, semconv.HTTPRequestMethodKey.String(engine.BoundedMethod(r.Method)),
		semconv.ServerAddress(engine.BoundedHost(r.Host)), semconv.URLPath(engine.BoundedPath(r.Path)))
	defer span.End()
	out := s.decider.Decide(ctx, r)
	span.SetAttributes(attribute.String("countersign.verdict", string(out.Verdict)), attribute.String("countersign.reason_code", out.ReasonCode))
	if out.Intent != nil {
		ref := *out.Intent
		ref.BodySHA256 = BodyDigest(r.Body)
		out.Intent = &ref
	}
	return ToCheckResponse(out), nil
}
