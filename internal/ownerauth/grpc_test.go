package ownerauth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/api"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/quota"
	"github.com/countersign/countersign/internal/testing/testclock"
)

// echoOwner answers with the owner the guard put in the context.
type echoOwner struct {
	countersignv1.UnimplementedOwnerServiceServer
}

func (echoOwner) GetAgent(ctx context.Context, _ *countersignv1.GetAgentRequest) (*countersignv1.GetAgentResponse, error) {
	id, err := ownerauth.OwnerID(ctx)
	if err != nil {
		return nil, api.ToStatus(err)
	}
	return &countersignv1.GetAgentResponse{Agent: &countersignv1.Agent{DisplayName: id}}, nil
}

func (echoOwner) WatchIntents(_ *countersignv1.WatchIntentsRequest, ss grpc.ServerStreamingServer[countersignv1.WatchIntentsResponse]) error {
	o, ok := ownerauth.FromContext(ss.Context())
	if !ok {
		return status.Error(codes.Internal, "no owner in the stream context")
	}
	return ss.Send(&countersignv1.WatchIntentsResponse{Intent: &countersignv1.Intent{RailAccount: o.ID}})
}

type harness struct {
	owner  countersignv1.OwnerServiceClient
	health healthpb.HealthClient
	rest   *httptest.Server
}

// serve runs a gRPC server guarded by g, and the REST gateway in front of
// it as server.go wires it.
func serve(t *testing.T, g *ownerauth.Guard) harness {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(g.Unary()), grpc.ChainStreamInterceptor(g.Stream()))
	countersignv1.RegisterOwnerServiceServer(srv, echoOwner{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	gw := runtime.NewServeMux(runtime.WithOutgoingHeaderMatcher(quota.OutgoingHeaderMatcher))
	if err := countersignv1.RegisterOwnerServiceHandlerClient(context.Background(), gw, countersignv1.NewOwnerServiceClient(conn)); err != nil {
		t.Fatal(err)
	}
	rest := httptest.NewServer(gw)
	t.Cleanup(rest.Close)
	return harness{owner: countersignv1.NewOwnerServiceClient(conn), health: healthpb.NewHealthClient(conn), rest: rest}
}

func withAuth(values ...string) context.Context {
	md := metadata.MD{}
	for _, v := range values {
		md.Append("authorization", v)
	}
	return metadata.NewOutgoingContext(context.Background(), md)
}

func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

func retryOf(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// tokenFixture is an authenticator over live tokens of two owners.
func tokenFixture(t *testing.T, clk *testclock.Clock) (a *ownerauth.Authenticator, alice, bob string) {
	t.Helper()
	store := &fakeTokens{}
	alice = store.add(t, ledger.OwnerToken{ID: "otk_alice", OwnerID: "own_alice", ExpiresAt: clk.Now().Add(24 * time.Hour)})
	bob = store.add(t, ledger.OwnerToken{ID: "otk_bob", OwnerID: "own_bob", ExpiresAt: clk.Now().Add(24 * time.Hour)})
	a, err := ownerauth.New(ownerauth.Config{Now: clk.Now}, store)
	if err != nil {
		t.Fatal(err)
	}
	return a, alice, bob
}

func TestGuardAdmitsOwnersToTheOwnerServiceOnly(t *testing.T) {
	clk := newClock()
	a, alice, _ := tokenFixture(t, clk)
	h := serve(t, &ownerauth.Guard{Auth: a, ToStatus: api.ToStatus})
	agent, _, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	req := &countersignv1.GetAgentRequest{AgentId: "agt_x"}

	resp, err := h.owner.GetAgent(withAuth("Bearer "+alice), req)
	if err != nil || resp.GetAgent().GetDisplayName() != "own_alice" {
		t.Fatalf("owner call = %v, %v; want the handler to see own_alice", resp, err)
	}
	refused := []struct {
		name, reason string
		ctx          context.Context
	}{
		{"no credential", "UNAUTHENTICATED", context.Background()},
		{"an agent credential", "AGENT_CREDENTIAL_REFUSED", withAuth("Bearer " + agent)},
		{"two authorization values", "UNAUTHENTICATED", withAuth("Bearer "+alice, "Bearer "+agent)},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.owner.GetAgent(tc.ctx, req)
			if status.Code(err) != codes.Unauthenticated || reasonOf(err) != tc.reason {
				t.Fatalf("err = %v (reason %q), want Unauthenticated with %s", err, reasonOf(err), tc.reason)
			}
		})
	}

	t.Run("stream", func(t *testing.T) {
		st, err := h.owner.WatchIntents(withAuth("Bearer "+alice), &countersignv1.WatchIntentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := st.Recv()
		if err != nil || msg.GetIntent().GetRailAccount() != "own_alice" {
			t.Fatalf("stream as alice = %v, %v", msg, err)
		}
		st, err = h.owner.WatchIntents(withAuth("Bearer "+agent), &countersignv1.WatchIntentsRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.Unauthenticated || reasonOf(err) != "AGENT_CREDENTIAL_REFUSED" {
			t.Fatalf("stream with an agent credential: %v", err)
		}
	})

	t.Run("other services are untouched", func(t *testing.T) {
		hr, err := h.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health without a credential = %v, %v", hr, err)
		}
	})

	t.Run("REST", func(t *testing.T) {
		for _, tc := range []struct {
			name, authz string
			code        int
			reason      string
		}{
			{"owner token", "Bearer " + alice, http.StatusOK, ""},
			{"agent credential", "Bearer " + agent, http.StatusUnauthorized, "AGENT_CREDENTIAL_REFUSED"},
			{"none", "", http.StatusUnauthorized, "UNAUTHENTICATED"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp := restGet(t, h.rest.URL+"/v1/agents/agt_x", tc.authz)
				if resp.code != tc.code || (tc.reason != "" && resp.reason != tc.reason) {
					t.Fatalf("REST = %d %q, want %d %q", resp.code, resp.reason, tc.code, tc.reason)
				}
			})
		}
	})
}

func TestGuardQuotas(t *testing.T) {
	t.Run("per source", func(t *testing.T) {
		clk := newClock()
		a, alice, bob := tokenFixture(t, clk)
		h := serve(t, &ownerauth.Guard{Auth: a, ToStatus: api.ToStatus,
			Sources: quota.NewLimiter(quota.Options{Rate: 0.5, Burst: 3, Now: clk.Now}),
			// Counting nothing, but remembering who authenticated.
			Failures: quota.NewFailures(quota.Options{}, quota.Options{})})
		req := &countersignv1.GetAgentRequest{AgentId: "agt_x"}
		// Calls that authenticate nobody use up the source's quota.
		for i := range 3 {
			bad, _, _ := ownerauth.MintToken()
			if _, err := h.owner.GetAgent(withAuth("Bearer "+bad), req); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("call %d: %v, want Unauthenticated", i+1, err)
			}
		}
		var hdr metadata.MD
		_, err := h.owner.GetAgent(withAuth("Bearer "+bob), req, grpc.Header(&hdr))
		if status.Code(err) != codes.ResourceExhausted || reasonOf(err) != "RATE_LIMITED" || retryOf(err) != 2*time.Second {
			t.Fatalf("fourth call from the source = %v (reason %q, retry %v); want RESOURCE_EXHAUSTED, RATE_LIMITED, 2s",
				err, reasonOf(err), retryOf(err))
		}
		if got := hdr.Get("retry-after"); len(got) != 1 || got[0] != "2" {
			t.Fatalf("retry-after header = %v, want [2]", got)
		}
		// The REST gateway here reaches the server over the same in-memory
		// connection, so its call has the same source and is refused as 429.
		resp := restGet(t, h.rest.URL+"/v1/agents/agt_x", "Bearer "+alice)
		if resp.code != http.StatusTooManyRequests || resp.retryAfter != "2" || resp.reason != "RATE_LIMITED" {
			t.Fatalf("REST over quota = %d, Retry-After %q, reason %q; want 429, 2, RATE_LIMITED", resp.code, resp.retryAfter, resp.reason)
		}
		clk.Advance(2 * time.Second)
		if _, err := h.owner.GetAgent(withAuth("Bearer "+alice), req); err != nil {
			t.Fatalf("after the wait: %v", err)
		}
		// Alice has authenticated: whoever else exhausts the source (it
		// may be shared: a port-forward, the pod's 127.0.0.1), her
		// calls are held to her owner quota, not to the source's.
		for range 3 {
			bad, _, _ := ownerauth.MintToken()
			_, _ = h.owner.GetAgent(withAuth("Bearer "+bad), req)
		}
		for i := range 5 {
			if _, err := h.owner.GetAgent(withAuth("Bearer "+alice), req); err != nil {
				t.Fatalf("admitted owner's call %d from an exhausted source: %v", i+1, err)
			}
		}
		if _, err := h.owner.GetAgent(withAuth("Bearer "+bob), req); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a credential not yet admitted from the exhausted source = %v, want ResourceExhausted", err)
		}
	})

	t.Run("per owner", func(t *testing.T) {
		clk := newClock()
		a, alice, bob := tokenFixture(t, clk)
		h := serve(t, &ownerauth.Guard{Auth: a, ToStatus: api.ToStatus,
			Owners: quota.NewLimiter(quota.Options{Rate: 1, Burst: 2, Now: clk.Now})})
		req := &countersignv1.GetAgentRequest{AgentId: "agt_x"}
		for range 2 {
			if _, err := h.owner.GetAgent(withAuth("Bearer "+alice), req); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := h.owner.GetAgent(withAuth("Bearer "+alice), req); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("alice's third call = %v, want ResourceExhausted", err)
		}
		if _, err := h.owner.GetAgent(withAuth("Bearer "+bob), req); err != nil {
			t.Fatalf("bob is limited by alice's quota: %v", err)
		}
		st, err := h.owner.WatchIntents(withAuth("Bearer "+alice), &countersignv1.WatchIntentsRequest{})
		var hdr metadata.MD
		if err == nil {
			_, err = st.Recv()
			hdr, _ = st.Header()
		}
		if status.Code(err) != codes.ResourceExhausted || len(hdr.Get("retry-after")) != 1 {
			t.Fatalf("alice's stream over quota = %v, header %v; want ResourceExhausted with retry-after", err, hdr)
		}
	})
}

func TestGuardBlocksRepeatedFailures(t *testing.T) {
	t.Run("per source", func(t *testing.T) {
		clk := newClock()
		a, alice, _ := tokenFixture(t, clk)
		h := serve(t, &ownerauth.Guard{Auth: a, ToStatus: api.ToStatus,
			Failures: quota.NewFailures(quota.Options{Rate: 0.1, Burst: 3, Now: clk.Now}, quota.Options{})})
		req := &countersignv1.GetAgentRequest{AgentId: "agt_x"}
		for i := range 3 {
			bad, _, _ := ownerauth.MintToken()
			if _, err := h.owner.GetAgent(withAuth("Bearer "+bad), req); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("bad attempt %d = %v, want Unauthenticated", i+1, err)
			}
		}
		_, err := h.owner.GetAgent(withAuth("Bearer "+alice), req)
		if status.Code(err) != codes.ResourceExhausted || retryOf(err) != 10*time.Second {
			t.Fatalf("after 3 failures even a good token = %v (retry %v); want ResourceExhausted, 10s", err, retryOf(err))
		}
		clk.Advance(10 * time.Second)
		if _, err := h.owner.GetAgent(withAuth("Bearer "+alice), req); err != nil {
			t.Fatalf("after the wait: %v", err)
		}
	})

	t.Run("an admitted owner is not locked out by another's failures", func(t *testing.T) {
		clk := newClock()
		a, alice, bob := tokenFixture(t, clk)
		h := serve(t, &ownerauth.Guard{Auth: a, ToStatus: api.ToStatus,
			Failures: quota.NewFailures(quota.Options{Rate: 0.1, Burst: 3, Now: clk.Now}, quota.Options{Rate: 0.1, Burst: 3, Now: clk.Now})})
		req := &countersignv1.GetAgentRequest{AgentId: "agt_x"}
		if _, err := h.owner.GetAgent(withAuth("Bearer "+alice), req); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			bad, _, _ := ownerauth.MintToken()
			_, _ = h.owner.GetAgent(withAuth("Bearer "+bad), req)
		}
		if _, err := h.owner.GetAgent(withAuth("Bearer "+alice), req); err != nil {
			t.Fatalf("admitted owner after a guesser's failures from her source: %v", err)
		}
		// A guesser gains nothing from the exemption: a new credential
		// from the blocked source is refused before it is looked up.
		if _, err := h.owner.GetAgent(withAuth("Bearer "+bob), req); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("an unadmitted credential from the blocked source = %v, want ResourceExhausted", err)
		}
	})

	// Owner bob authenticating with one new credential after another (as
	// every console sign-in is) must not push alice's credential out of
	// the remembered set and so behind the block her agent keeps on their
	// shared source.
	t.Run("another owner's credentials do not evict an admitted owner", func(t *testing.T) {
		clk := newClock()
		store := &fakeTokens{}
		alice := store.add(t, ledger.OwnerToken{ID: "otk_alice", OwnerID: "own_alice", ExpiresAt: clk.Now().Add(24 * time.Hour)})
		const maxKeys = 2 * quota.DefaultKnownPerOwner
		var bobs []string
		for i := range 3 * maxKeys {
			bobs = append(bobs, store.add(t, ledger.OwnerToken{ID: fmt.Sprintf("otk_bob%d", i), OwnerID: "own_bob", ExpiresAt: clk.Now().Add(24 * time.Hour)}))
		}
		a, err := ownerauth.New(ownerauth.Config{Now: clk.Now}, store)
		if err != nil {
			t.Fatal(err)
		}
		h := serve(t, &ownerauth.Guard{Auth: a, ToStatus: api.ToStatus,
			Failures: quota.NewFailures(quota.Options{Rate: 0.1, Burst: 3, Now: clk.Now}, quota.Options{Rate: 0.1, Burst: 3, Now: clk.Now, MaxKeys: maxKeys})})
		req := &countersignv1.GetAgentRequest{AgentId: "agt_x"}
		if _, err := h.owner.GetAgent(withAuth("Bearer "+alice), req); err != nil {
			t.Fatal(err)
		}
		for i, bob := range bobs {
			if _, err := h.owner.GetAgent(withAuth("Bearer "+bob), req); err != nil {
				t.Fatalf("bob's credential %d: %v", i, err)
			}
		}
		// Alice's agent, on her source, fails until the source is blocked.
		agent, _, _ := credential.Generate()
		for range 3 {
			_, _ = h.owner.GetAgent(withAuth("Bearer "+agent), req)
		}
		if _, err := h.owner.GetAgent(withAuth("Bearer "+bobs[0]), req); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("bob's oldest credential, forgotten, from the blocked source = %v, want ResourceExhausted", err)
		}
		if _, err := h.owner.GetAgent(withAuth("Bearer "+alice), req); err != nil {
			t.Fatalf("alice after another owner's %d credentials: %v", len(bobs), err)
		}
	})

	t.Run("per credential", func(t *testing.T) {
		clk := newClock()
		a, alice, _ := tokenFixture(t, clk)
		h := serve(t, &ownerauth.Guard{Auth: a, ToStatus: api.ToStatus,
			Failures: quota.NewFailures(quota.Options{}, quota.Options{Rate: 0.01, Burst: 2, Now: clk.Now})})
		req := &countersignv1.GetAgentRequest{AgentId: "agt_x"}
		agent, _, _ := credential.Generate()
		for range 2 {
			if _, err := h.owner.GetAgent(withAuth("Bearer "+agent), req); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("agent credential = %v, want Unauthenticated", err)
			}
		}
		if _, err := h.owner.GetAgent(withAuth("Bearer "+agent), req); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("the same credential a third time = %v, want ResourceExhausted", err)
		}
		other, _, _ := ownerauth.MintToken()
		if _, err := h.owner.GetAgent(withAuth("Bearer "+other), req); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("another credential = %v, want Unauthenticated (not blocked)", err)
		}
		if _, err := h.owner.GetAgent(withAuth("Bearer "+alice), req); err != nil {
			t.Fatalf("a good token from the same source: %v", err)
		}
	})
}

type restResponse struct {
	code               int
	reason, retryAfter string
}

func restGet(t *testing.T, url, authz string) restResponse {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Details []struct {
			Type   string `json:"@type"`
			Reason string `json:"reason"`
		} `json:"details"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	out := restResponse{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	for _, d := range body.Details {
		if d.Reason != "" {
			out.reason = d.Reason
		}
	}
	return out
}
