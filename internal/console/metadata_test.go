package console_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/console"
)

// recordingOwners answers ListAgents and keeps the metadata it arrived with.
type recordingOwners struct {
	countersignv1.UnimplementedOwnerServiceServer
	mu sync.Mutex
	md metadata.MD
}

func (s *recordingOwners) ListAgents(ctx context.Context, _ *countersignv1.ListAgentsRequest) (*countersignv1.ListAgentsResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.md = md.Copy()
	s.mu.Unlock()
	return &countersignv1.ListAgentsResponse{}, nil
}

// TestCookieNeverReachesGRPCMetadata: through the real grpc-gateway (whose
// default matcher forwards Cookie as grpcgateway-cookie), the wrapper
// leaves no cookie, session secret in a cookie or CSRF token in the gRPC
// call's metadata; the session arrives only as the authorization the
// gateway forwards (authorization, and grpcgateway-authorization as it does
// for every Authorization header).
func TestCookieNeverReachesGRPCMetadata(t *testing.T) {
	owners := &recordingOwners{}
	gs := grpc.NewServer()
	countersignv1.RegisterOwnerServiceServer(gs, owners)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	gw := runtime.NewServeMux()
	if err := countersignv1.RegisterOwnerServiceHandlerFromEndpoint(ctx, gw, lis.Addr().String(),
		[]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, rigOptions{api: gw})
	se, body := r.signIn(r.token)
	secret := se.whole()
	for _, tc := range []struct {
		name    string
		headers []string
		authz   string
	}{
		{"session cookie", []string{"Cookie", cookie(se.cookie) + "; theme=dark", console.SessionKeyHeader, se.key, "X-Countersign-CSRF", body["csrf_token"].(string)}, "Bearer " + secret},
		{"owner token with a cookie", []string{"Authorization", "Bearer " + r.token, "Cookie", cookie(se.cookie), console.SessionKeyHeader, se.key}, "Bearer " + r.token},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if x := r.do("GET", "/v1/agents", "", tc.headers...); x.status != http.StatusOK {
				t.Fatalf("GET /v1/agents = %d %s", x.status, x.body)
			}
			owners.mu.Lock()
			md := owners.md
			owners.mu.Unlock()
			if got := md.Get("authorization"); len(got) != 1 || got[0] != tc.authz {
				t.Errorf("authorization metadata = %q, want %q", got, tc.authz)
			}
			for k, vals := range md {
				if strings.Contains(k, "cookie") || strings.Contains(k, "csrf") || strings.Contains(k, "session-key") {
					t.Errorf("metadata %s = %q reached gRPC", k, vals)
				}
				for _, v := range vals {
					if k != "authorization" && k != "grpcgateway-authorization" && (strings.Contains(v, se.cookie) || strings.Contains(v, se.key)) {
						t.Errorf("metadata %s carries the session secret", k)
					}
				}
			}
		})
	}
}
