package ownerauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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
// earn the exemption, and one owner cannot take it from another: it is
// remembered per owner (see quota.Failures).
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
	// Recheck is how often a stream's credential is authenticated again
	// (see Stream); 0: DefaultRecheck.
	Recheck time.Duration
}

// DefaultRecheck is how often an open stream's credential is
// authenticated again, as the console re-reads a cookie session.
const DefaultRecheck = 30 * time.Second

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
		o, _, _, err := g.admit(ctx)
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

// Stream is the guard as a stream server interceptor. A stream is
// admitted as a call is, and then stays bound to its credential: its
// context ends when the credential expires (when that is known), and the
// credential is authenticated again every Recheck; when it no longer
// authenticates (revoked, signed out, its OIDC subject off the allowlist)
// or cannot be checked (fail closed), the stream ends with that error
// (Unauthenticated; Unavailable for a ledger failure). A watch stream thus
// outlives the revocation of its credential by at most Recheck.
func (g *Guard) Stream() grpc.StreamServerInterceptor {
	g.mustBeWired()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !g.guards(info.FullMethod) {
			return handler(srv, ss)
		}
		o, authz, until, err := g.admit(ss.Context())
		if err != nil {
			var ex *quota.ExhaustedError
			if errors.As(err, &ex) {
				quota.SetStreamRetryAfter(ss, ex.RetryAfter)
			}
			return g.ToStatus(err)
		}
		ctx, stop := g.bind(ss.Context(), authz, until)
		err = handler(srv, &ownerStream{ServerStream: ss, ctx: NewContext(ctx, o)})
		if ended := stop(); ended != nil {
			return g.ToStatus(ended)
		}
		return err
	}
}

// credentialEnded is why bind ended a stream's context.
type credentialEnded struct{ err error }

func (e credentialEnded) Error() string { return e.err.Error() }
func (e credentialEnded) Unwrap() error { return e.err }

// bind is parent, ended when the credential authz stops authenticating:
// at until (if not zero), or at the first Recheck that refuses it. stop
// releases it and returns why bind ended it (nil: it did not).
func (g *Guard) bind(parent context.Context, authz string, until time.Time) (context.Context, func() error) {
	every := g.Recheck
	if every <= 0 {
		every = DefaultRecheck
	}
	return Bind(parent, until, g.Auth.now, every, func(ctx context.Context) error {
		_, _, err := g.Auth.authenticate(ctx, authz)
		return err
	})
}

// Bind is parent, ended at until (if not zero; now is the clock it is
// measured on) with ErrUnauthenticated, or at the first check, run every
// period, that fails, with its error: what keeps a long request (a watch
// stream) bound to the credential that opened it. stop releases it and
// returns the error that ended it (nil: Bind did not end it).
func Bind(parent context.Context, until time.Time, now func() time.Time, every time.Duration, check func(context.Context) error) (ctx context.Context, stop func() error) {
	ctx, cancel := context.WithCancelCause(parent)
	var expiry *time.Timer
	if !until.IsZero() {
		expiry = time.AfterFunc(until.Sub(now()), func() {
			cancel(credentialEnded{fmt.Errorf("%w: the stream's credential expired", ErrUnauthenticated)})
		})
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := check(ctx); err != nil {
					cancel(credentialEnded{err})
					return
				}
			}
		}
	}()
	return ctx, func() error {
		if expiry != nil {
			expiry.Stop()
		}
		close(done)
		<-exited
		var ended credentialEnded
		if errors.As(context.Cause(ctx), &ended) && parent.Err() == nil {
			cancel(nil)
			return ended.err
		}
		cancel(nil)
		return nil
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

// admit returns the admitted owner, the credential it presented and when
// that stops authenticating (zero: not known).
func (g *Guard) admit(ctx context.Context) (Owner, string, time.Time, error) {
	src := g.Peers.Source(ctx)
	authz, authzErr := authorization(ctx)
	credKey := ""
	if authzErr == nil {
		credKey = credentialKey(authz)
	}
	if !g.Failures.Known(credKey) {
		if blocked, wait := g.Failures.Blocked(src); blocked {
			return Owner{}, "", time.Time{}, &quota.ExhaustedError{Scope: "failed authentications from this source", RetryAfter: wait}
		}
		if ok, wait := g.Sources.Allow(src); !ok {
			return Owner{}, "", time.Time{}, &quota.ExhaustedError{Scope: "owner API calls from this source", RetryAfter: wait}
		}
	}
	if authzErr != nil {
		g.Failures.Note(src, "")
		return Owner{}, "", time.Time{}, authzErr
	}
	if blocked, wait := g.Failures.BlockedIdentity(credKey); blocked {
		return Owner{}, "", time.Time{}, &quota.ExhaustedError{Scope: "failed authentications with this credential", RetryAfter: wait}
	}
	o, until, err := g.Auth.authenticate(ctx, authz)
	if err != nil {
		if errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrAgentCredential) || errors.Is(err, ErrNotAllowed) {
			g.Failures.Note(src, credKey) // and no longer exempt
		}
		return Owner{}, "", time.Time{}, err
	}
	// Remembered among o's own credentials: no other owner's activity can
	// push it out of the exemption (quota.Failures).
	g.Failures.AdmitFor(o.ID, credKey)
	if ok, wait := g.Owners.Allow(o.ID); !ok {
		return Owner{}, "", time.Time{}, &quota.ExhaustedError{Scope: "owner API calls by this owner", RetryAfter: wait}
	}
	return o, authz, until, nil
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
