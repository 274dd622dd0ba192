package ownerauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/countersign/countersign/internal/quota"
)

// ServicePrefix is the full-method prefix of the owner API: the guard acts
// on these calls and lets every other service through untouched.
const ServicePrefix = "/countersign.v1.OwnerService/"

type ctxKey struct{}

// NewContext returns ctx carrying o.
func NewContext(ctx context.Context, o Owner) context.Context {
	return context.WithValue(ctx, ctxKey{}, o)
}

// FromContext returns the authenticated owner of an owner API call.
func FromContext(ctx context.Context) (Owner, bool) {
	o, ok := ctx.Value(ctxKey{}).(Owner)
	return o, ok
}

// Guard admits owner API calls. For each call under ServicePrefix, in order:
//
//  1. a source that failed authentication too often is refused (429);
//  2. a source over its call quota is refused (429);
//  3. a credential that failed too often, from any source, is refused (429);
//  4. the Authorization metadata is authenticated; a failure is counted
//     against the source and the credential and refused (401, or 403 for
//     a verified OIDC subject that is not on the owner allowlist);
//  5. an owner over its call quota is refused (429);
//  6. the handler runs with the Owner in its context (FromContext).
//
// The source is Peers.Source: the connection's address, or the HTTP peer
// the in-process REST gateway reports; a forwarding header counts only from
// a trusted proxy. A source can still be shared (owners behind one
// port-forward, agents in the pod, all 127.0.0.1), so a credential that has
// authenticated skips steps 1 and 2: another caller's failures or floods
// from the same address cannot lock it out, and it is held to step 5, its
// owner's quota, instead. A caller without a working credential cannot
// earn the exemption (see quota.Failures).
//
// Calls to every other service (other than Methods) pass through untouched.
type Guard struct {
	Auth *Authenticator
	// Peers names a call's source; the zero value trusts no proxy.
	Peers quota.Peers
	// Sources limits calls per source (Peers.Source) until a credential
	// has authenticated; nil: unlimited.
	Sources *quota.Limiter
	// Owners limits calls per owner id; nil: unlimited.
	Owners *quota.Limiter
	// Failures counts failed authentications and remembers which
	// credentials have authenticated; nil: nothing is counted, and no
	// credential is exempt from the source quotas.
	Failures *quota.Failures
	// ToStatus maps errors to gRPC statuses with ErrorInfo (api.ToStatus).
	ToStatus func(error) error
	// Methods are further full method names, outside ServicePrefix, that
	// only an owner may call (DecisionService.Reconcile).
	Methods []string
}

// guards reports whether the guard admits calls of fullMethod.
func (g *Guard) guards(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, ServicePrefix) || slices.Contains(g.Methods, fullMethod)
}

// Unary is the guard as a unary server interceptor.
func (g *Guard) Unary() grpc.UnaryServerInterceptor {
	g.mustBeWired()
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !g.guards(info.FullMethod) {
			return handler(ctx, req)
		}
		o, err := g.admit(ctx)
		if err != nil {
			var ex *quota.ExhaustedError
			if errors.As(err, &ex) {
				quota.SetRetryAfter(ctx, ex.RetryAfter)
			}
			return nil, g.ToStatus(err)
		}
		return handler(NewContext(ctx, o), req)
	}
}

// Stream is the guard as a stream server interceptor.
func (g *Guard) Stream() grpc.StreamServerInterceptor {
	g.mustBeWired()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !g.guards(info.FullMethod) {
			return handler(srv, ss)
		}
		o, err := g.admit(ss.Context())
		if err != nil {
			var ex *quota.ExhaustedError
			if errors.As(err, &ex) {
				quota.SetStreamRetryAfter(ss, ex.RetryAfter)
			}
			return g.ToStatus(err)
		}
		return handler(srv, &ownerStream{ServerStream: ss, ctx: NewContext(ss.Context(), o)})
	}
}

// mustBeWired fails at start-up, not on the first call, when the guard
// lacks what every call needs.
func (g *Guard) mustBeWired() {
	if g.Auth == nil || g.ToStatus == nil {
		panic("ownerauth: Guard needs Auth and ToStatus")
	}
}

type ownerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ownerStream) Context() context.Context { return s.ctx }

func (g *Guard) admit(ctx context.Context) (Owner, error) {
	src := g.Peers.Source(ctx)
	authz, authzErr := authorization(ctx)
	credKey := ""
	if authzErr == nil {
		credKey = credentialKey(authz)
	}
	if !g.Failures.Known(credKey) {
		if blocked, wait := g.Failures.Blocked(src); blocked {
			return Owner{}, &quota.ExhaustedError{Scope: "failed authentications from this source", RetryAfter: wait}
		}
		if ok, wait := g.Sources.Allow(src); !ok {
			return Owner{}, &quota.ExhaustedError{Scope: "owner API calls from this source", RetryAfter: wait}
		}
	}
	if authzErr != nil {
		g.Failures.Note(src, "")
		return Owner{}, authzErr
	}
	if blocked, wait := g.Failures.BlockedIdentity(credKey); blocked {
		return Owner{}, &quota.ExhaustedError{Scope: "failed authentications with this credential", RetryAfter: wait}
	}
	o, err := g.Auth.Authenticate(ctx, authz)
	if err != nil {
		if errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrAgentCredential) || errors.Is(err, ErrNotAllowed) {
			g.Failures.Note(src, credKey) // and no longer exempt
		}
		return Owner{}, err
	}
	g.Failures.Admit(credKey)
	if ok, wait := g.Owners.Allow(o.ID); !ok {
		return Owner{}, &quota.ExhaustedError{Scope: "owner API calls by this owner", RetryAfter: wait}
	}
	return o, nil
}

// authorization is the one Authorization value of the call. Two are refused:
// which one would be believed is exactly what an attacker would play with.
func authorization(ctx context.Context) (string, error) {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	switch len(vals) {
	case 0:
		return "", nil // Authenticate answers "no credential"
	case 1:
		return vals[0], nil
	default:
		return "", fmt.Errorf("%w: more than one Authorization value", ErrUnauthenticated)
	}
}

// credentialKey names a presented credential in the failure counter without
// keeping the credential: 64 bits of its SHA-256.
func credentialKey(authz string) string {
	if strings.TrimSpace(authz) == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(authz))
	return "cred:" + hex.EncodeToString(sum[:8])
}

// OwnerID is the calling owner's id, for the owner service (api.OwnerOf):
// ErrUnauthenticated when no owner was admitted.
func OwnerID(ctx context.Context) (string, error) {
	o, ok := FromContext(ctx)
	if !ok || o.ID == "" {
		return "", ErrUnauthenticated
	}
	return o.ID, nil
}
