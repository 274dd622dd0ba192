package extauthz

import (
	"context"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/countersign/countersign/internal/engine"
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
}

// NewServer returns an ext_authz server over d. maxBody is Envoy's
// with_request_body.max_request_bytes (see BodyIsWhole).
func NewServer(d Decider, maxBody int) *Server { return &Server{decider: d, maxBody: maxBody} }

// Check answers one Envoy authorization request. It never returns an error:
// a cancelled context or an internal failure is a deny the engine produced.
// An allowed attempt carries the digest of the body it was decided on, so
// ext_proc can refuse any other body (A2).
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	r := FromCheckRequest(req, s.maxBody)
	out := s.decider.Decide(ctx, r)
	if out.Intent != nil {
		ref := *out.Intent
		ref.BodySHA256 = BodyDigest(r.Body)
		out.Intent = &ref
	}
	return ToCheckResponse(out), nil
}
