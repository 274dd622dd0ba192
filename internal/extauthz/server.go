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
}

// NewServer returns an ext_authz server over d.
func NewServer(d Decider) *Server { return &Server{decider: d} }

// Check answers one Envoy authorization request. It never returns an error:
// a cancelled context or an internal failure is a deny the engine produced.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return ToCheckResponse(s.decider.Decide(ctx, FromCheckRequest(req))), nil
}
