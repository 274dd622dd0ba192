package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/ownerauth"
)

// failBurst is the failed-authentication burst of these tests; nothing is
// forgiven while they run.
const failBurst = 3

func strictFailures() harnessOption {
	return harnessOption{cfg: func(c *config.Config) { c.AuthFailureBurst, c.AuthFailureRate = failBurst, 0.0001 }}
}

// victimAddr is a second real source on this machine: all of 127.0.0.0/8
// is loopback, so a client can connect from 127.0.0.2.
var victimAddr = net.ParseIP("127.0.0.2")

func fromVictim() *net.Dialer { return &net.Dialer{LocalAddr: &net.TCPAddr{IP: victimAddr}} }

// restFrom calls the owner REST API with the given headers, from local (nil:
// the default, 127.0.0.1).
func restFrom(t *testing.T, h *allowHarness, local *net.Dialer, auth string, headers map[string]string) int {
	t.Helper()
	c := http.DefaultClient
	if local != nil {
		c = &http.Client{Transport: &http.Transport{DialContext: local.DialContext}}
		defer c.CloseIdleConnections()
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+h.httpAddr+"/v1/agents", nil)
	req.Header.Set("Authorization", auth)
	for k, v := range headers {
		req.Header.Add(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func badOwnerToken(t *testing.T) string {
	t.Helper()
	tok, _, err := ownerauth.MintToken()
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + tok
}

func freshOwnerToken(t *testing.T, h *allowHarness, name string) string {
	t.Helper()
	_, tok, _, err := ownerauth.Bootstrap(context.Background(), h.store, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + tok
}

// forgedSource is the address a forger claims on its i-th call: a new
// invented one at first (to spread its failures), then the victim's (to
// charge them to another real source).
func forgedSource(i int) string {
	if i < failBurst+5 {
		return fmt.Sprintf("198.51.100.%d", i+1)
	}
	return victimAddr.String()
}

// TestRESTForwardingHeadersAreNotASource: a REST caller that fails
// authentication is counted as the address it connects from, whatever
// X-Forwarded-For (or gateway metadata smuggled as headers) it sends. It
// cannot spread its failures over invented sources, and naming another
// real source does not charge that source.
func TestRESTForwardingHeadersAreNotASource(t *testing.T) {
	h := railHarness(t, strictFailures())
	// An owner at another loopback address, whose token authenticates
	// before the failures start.
	victimToken := freshOwnerToken(t, h, "victim")
	if s := restFrom(t, h, fromVictim(), victimToken, nil); s != http.StatusOK {
		t.Fatalf("owner at %s before the failures = %d", victimAddr, s)
	}
	forged := func(i int) map[string]string {
		return map[string]string{
			"X-Forwarded-For":                        forgedSource(i),
			"Forwarded":                              "for=" + forgedSource(i),
			"X-Real-Ip":                              forgedSource(i),
			"Grpc-Metadata-X-Forwarded-For":          forgedSource(i),
			"Grpc-Metadata-Countersign-Gateway-Peer": forgedSource(i) + ":1",
		}
	}
	for i := range failBurst {
		if s := restFrom(t, h, nil, badOwnerToken(t), forged(i)); s != http.StatusUnauthorized {
			t.Fatalf("bad token %d = %d, want 401", i+1, s)
		}
	}
	for i := failBurst; i < failBurst+10; i++ {
		if s := restFrom(t, h, nil, badOwnerToken(t), forged(i)); s != http.StatusTooManyRequests {
			t.Fatalf("bad token %d from a new forged source = %d, want 429: the failures were spread", i+1, s)
		}
	}
	// The caller is blocked as itself: even a good owner token it has never
	// used is refused from here.
	if s := restFrom(t, h, nil, freshOwnerToken(t, h, "second"), nil); s != http.StatusTooManyRequests {
		t.Fatalf("a new token from the blocked source = %d, want 429", s)
	}
	// An owner whose token has authenticated is not locked out, from any
	// loopback address; every loopback address is the one source the
	// failures were counted to (any process of the pod may bind any).
	if s := restFrom(t, h, fromVictim(), victimToken, nil); s != http.StatusOK {
		t.Fatalf("owner at %s after the forged failures = %d, want 200: the forger locked out a token that authenticated", victimAddr, s)
	}
	if s := restFrom(t, h, fromVictim(), badOwnerToken(t), nil); s != http.StatusTooManyRequests {
		t.Fatalf("a bad token from %s = %d, want 429: the failures were spread over loopback addresses", victimAddr, s)
	}
}

// TestGRPCForwardingMetadataIsNotASource: the same over the gRPC listener
// directly, where a client writes metadata itself: x-forwarded-for and the
// gateway's own keys are ignored on every connection but the gateway's.
func TestGRPCForwardingMetadataIsNotASource(t *testing.T) {
	h := railHarness(t, strictFailures())
	victim, err := grpc.NewClient(h.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return fromVictim().DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	forged := func(i int, auth string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", auth,
			"x-forwarded-for", forgedSource(i),
			"countersign-gateway-peer", forgedSource(i)+":1", "countersign-gateway-forwarded-for", forgedSource(i))
	}
	owners := countersignv1.NewOwnerServiceClient(h.conn)
	list := func(ctx context.Context, c countersignv1.OwnerServiceClient) codes.Code {
		_, err := c.ListAgents(ctx, &countersignv1.ListAgentsRequest{})
		return status.Code(err)
	}

	t.Run("owner API", func(t *testing.T) {
		// An owner at another loopback address whose token has
		// authenticated before the forger starts.
		vctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", freshOwnerToken(t, h, "victim"))
		if c := list(vctx, countersignv1.NewOwnerServiceClient(victim)); c != codes.OK {
			t.Fatalf("owner at %s before the forged failures = %v, want OK", victimAddr, c)
		}
		for i := range failBurst {
			if c := list(forged(i, badOwnerToken(t)), owners); c != codes.Unauthenticated {
				t.Fatalf("bad token %d = %v, want Unauthenticated", i+1, c)
			}
		}
		for i := failBurst; i < failBurst+10; i++ {
			if c := list(forged(i, badOwnerToken(t)), owners); c != codes.ResourceExhausted {
				t.Fatalf("bad token %d from a new forged source = %v, want ResourceExhausted: the failures were spread", i+1, c)
			}
		}
		if c := list(vctx, countersignv1.NewOwnerServiceClient(victim)); c != codes.OK {
			t.Fatalf("owner at %s after the forged failures = %v, want OK: the forger locked out a caller whose token authenticated", victimAddr, c)
		}
		// Every loopback address is one source (any process of the pod may
		// bind any of them): a token never used before is refused there too.
		fresh := metadata.AppendToOutgoingContext(context.Background(), "authorization", freshOwnerToken(t, h, "fresh"))
		if c := list(fresh, countersignv1.NewOwnerServiceClient(victim)); c != codes.ResourceExhausted {
			t.Fatalf("a new token from %s after the failures = %v, want ResourceExhausted: the failures were spread over loopback addresses", victimAddr, c)
		}
	})

	t.Run("decision API", func(t *testing.T) {
		decide := func(ctx context.Context, c *grpc.ClientConn) codes.Code {
			a := refund("pi_bench", 10, "")
			a.Rail, a.RailAccount = countersignv1.Rail_RAIL_STRIPE, "acct_bench"
			_, err := countersignv1.NewDecisionServiceClient(c).Decide(ctx, &countersignv1.DecideRequest{
				Form: &countersignv1.DecideRequest_Action{Action: a}})
			return status.Code(err)
		}
		guess := func(i int) context.Context {
			g, _, _ := credential.Generate()
			return forged(i, "Bearer "+g)
		}
		// The agent at another loopback address authenticates before the
		// guesses start.
		actx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+h.secret)
		if c := decide(actx, victim); c == codes.ResourceExhausted || c == codes.Unauthenticated {
			t.Fatalf("the agent at %s before the guesses = %v", victimAddr, c)
		}
		for i := range failBurst {
			if c := decide(guess(i), h.conn); c != codes.Unauthenticated {
				t.Fatalf("guess %d = %v, want Unauthenticated", i+1, c)
			}
		}
		for i := failBurst; i < failBurst+10; i++ {
			if c := decide(guess(i), h.conn); c != codes.ResourceExhausted {
				t.Fatalf("guess %d from a new forged source = %v, want ResourceExhausted: the guesses were spread", i+1, c)
			}
		}
		g, _, _ := credential.Generate()
		vctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+g)
		if c := decide(vctx, victim); c != codes.ResourceExhausted {
			t.Fatalf("a guess from %s = %v, want ResourceExhausted: every loopback address is one source", victimAddr, c)
		}
		// The agent, whose credential has authenticated, is not locked out.
		if c := decide(actx, victim); c == codes.ResourceExhausted || c == codes.Unauthenticated {
			t.Fatalf("the agent at %s after the guesses = %v: locked out by another caller's failures", victimAddr, c)
		}
	})
}

// checkFrom is a Check as Envoy sends it for a downstream connection from
// addr, carrying whatever forwarding headers the agent wrote.
func checkFrom(t *testing.T, h *allowHarness, i int, addr, auth string, headers map[string]string) (int, string) {
	t.Helper()
	req := h.request(int64(1000 + i))
	hr := req.GetAttributes().GetRequest().GetHttp()
	hr.Headers["authorization"] = auth
	hr.Body = fmt.Sprintf("payment_intent=pi_bench&amount=%d", 100+i)
	for k, v := range headers {
		hr.Headers[k] = v
	}
	req.Attributes.Source = &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
		SocketAddress: &corev3.SocketAddress{Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(40000 + i)}}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := h.client.Check(ctx, req)
	if err != nil {
		t.Fatalf("Check returned a gRPC error: %v", err)
	}
	if codes.Code(resp.GetStatus().GetCode()) == codes.OK {
		return http.StatusOK, "ALLOW"
	}
	return deniedCode(t, resp)
}

// TestExtAuthzSourceIsEnvoysView: on ext_authz the failed-credential quota's
// source is the downstream address Envoy reports (from its socket), not a
// forwarding header the agent wrote. Agents of one pod share that address,
// so an agent whose credential has authenticated is not locked out by
// another agent's guesses from it.
func TestExtAuthzSourceIsEnvoysView(t *testing.T) {
	h := railHarness(t, strictFailures())
	const pod, other = "127.0.0.1", "192.0.2.10"
	allow := func(i int, addr, cred string) string {
		t.Helper()
		_, code := checkFrom(t, h, i, addr, "Bearer "+cred, nil)
		return code
	}
	// The honest agent works before the attack.
	if got := allow(0, pod, h.secret); got != "ALLOW" {
		t.Fatalf("honest agent before the attack: %s", got)
	}
	forged := func(i int) map[string]string {
		return map[string]string{"x-forwarded-for": forgedSource(i) + ", " + other, "x-real-ip": forgedSource(i)}
	}
	for i := 1; i <= failBurst; i++ {
		g, _, _ := credential.Generate()
		if s, code := checkFrom(t, h, i, pod, "Bearer "+g, forged(i)); s != http.StatusForbidden {
			t.Fatalf("guess %d = %d %s, want 403", i, s, code)
		}
	}
	for i := failBurst + 1; i <= failBurst+10; i++ {
		g, _, _ := credential.Generate()
		if s, code := checkFrom(t, h, i, pod, "Bearer "+g, forged(i)); s != http.StatusTooManyRequests || code != "too_many_failed_credentials" {
			t.Fatalf("guess %d with a new forged header = %d %s, want 429 too_many_failed_credentials", i, s, code)
		}
	}
	// The address the agent named in its headers is a real, separate
	// source as far as Envoy is concerned, and it was not charged.
	g, _, _ := credential.Generate()
	if s, code := checkFrom(t, h, 50, other, "Bearer "+g, nil); s != http.StatusForbidden {
		t.Fatalf("a guess from %s = %d %s, want 403 (its own first failure)", other, s, code)
	}
	// The honest agent in the same pod, already admitted, still passes.
	if got := allow(51, pod, h.secret); got != "ALLOW" {
		t.Fatalf("honest agent after another agent's guesses from the pod: %s, want ALLOW", got)
	}
	// What remains (quota.Failures): a credential this process has not
	// seen yet waits while its source is blocked.
	newcomer, hash, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.IssueCredential(context.Background(), h.agentID, credential.ScopeExecute, time.Now().Add(time.Hour), hash); err != nil {
		t.Fatal(err)
	}
	if s, code := checkFrom(t, h, 52, pod, "Bearer "+newcomer, nil); s != http.StatusTooManyRequests {
		t.Fatalf("an unseen credential from the blocked source = %d %s, want 429", s, code)
	}
	if got := allow(53, other, newcomer); got != "ALLOW" {
		t.Fatalf("the same credential from another source: %s, want ALLOW", got)
	}
}

// TestLoopbackAddressesAreOneSource: any process of the pod may bind its
// socket to any of 127.0.0.0/8 before it connects to Envoy, so Envoy
// reports a new source address for every connection the agent likes. They
// are one source: guesses spread over 40 loopback addresses are refused
// after the failure burst, and what they write stays bounded (found by a
// review: none refused, 40 records).
func TestLoopbackAddressesAreOneSource(t *testing.T) {
	h := railHarness(t, strictFailures())
	const guesses = 40
	blocked := 0
	var ids []string
	for i := range guesses {
		s, code := checkFrom(t, h, i, fmt.Sprintf("127.0.%d.%d", 2+i/200, 10+i%200), fmt.Sprintf("Bearer csk_junk%030d", i), nil)
		if s == http.StatusTooManyRequests || code == engine.ReasonTooManyFailures {
			blocked++
		}
		ids = append(ids, fmt.Sprint(1000+i))
	}
	if blocked < guesses-failBurst {
		t.Fatalf("%d of %d guesses from %d loopback addresses refused as too many failures; want all past the first %d", blocked, guesses, guesses, failBurst)
	}
	// The failures recorded, then at most one refusal a second (the run
	// may straddle a few seconds on a busy machine).
	if n, reasons := h.recorded(t, ids); n > failBurst+5 {
		t.Fatalf("%d decision records for %d guesses (%v); want the burst's and about one a second", n, guesses, reasons)
	}
}
