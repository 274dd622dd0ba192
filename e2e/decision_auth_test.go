package e2e

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestAgentForgesCommitWhileRefundIsAtRail (issue 10 item 2, A1), against
// the real binaries: the agent's refund goes out through Envoy and is slow
// at the rail. Meanwhile the agent, in the pod, calls the DecisionService
// listener directly: it reports the rail rejected the refund (without a
// commit token, with a guessed one), calls every RPC without a credential
// and with another agent's, tries Reconcile with its own credential, and
// re-sends the refund through Envoy as often as it likes. Every call is
// refused, and the journal shows exactly one refund.
func TestAgentForgesCommitWhileRefundIsAtRail(t *testing.T) {
	e := newRailEnv(t, envOptions{routeTimeout: 30 * time.Second})
	e.payment("stripe", "pi_forge", 10000, "usd")
	e.fault(map[string]any{"profile": "slow", "delay": "3s", "count": 1, "method": "POST", "path": "/v1/refunds"})
	ctx := context.Background()

	real := make(chan agentResponse, 1)
	go func() { real <- e.stripeRefund(nil, url.Values{"payment_intent": {"pi_forge"}, "amount": {"1500"}}) }()

	// The request has left for the rail once ext_proc stamped its body.
	var key ledger.Key
	if !wait.Until(20*time.Second, func() bool {
		for _, it := range e.intentsOn("pi_forge") {
			if _, atts, err := e.store.GetIntent(ctx, it.Key); err == nil && it.State == intent.InFlight && len(atts) == 1 && atts[0].BodyStamped {
				key = it.Key
				return true
			}
		}
		return false
	}) {
		t.Fatal("the refund never left for the rail")
	}

	conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := countersignv1.NewDecisionServiceClient(conn)
	as := func(cred string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+cred)
	}
	other := otherAgent(t, e.store)
	forged := func(token string) *countersignv1.CommitRequest {
		return &countersignv1.CommitRequest{RailAccount: key.RailAccount, Sik: key.SIK, AttemptSeq: 1, CommitToken: token, BodyStamped: true,
			Outcome: &countersignv1.CommitRequest_Response{Response: &countersignv1.HttpResponse{HttpStatus: 400,
				Body: []byte(`{"error":{"type":"invalid_request_error","code":"amount_too_large","message":"forged"}}`)}}}
	}
	getIntent := &countersignv1.DecisionServiceGetIntentRequest{RailAccount: key.RailAccount, Sik: key.SIK}
	reconcile := &countersignv1.ReconcileRequest{Target: &countersignv1.ReconcileRequest_Intent{
		Intent: &countersignv1.IntentKey{RailAccount: key.RailAccount, Sik: key.SIK}}}
	refusals := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"Commit without a token", func() error { _, err := c.Commit(as(e.secret), forged("")); return err }, codes.PermissionDenied},
		{"Commit with a guessed token", func() error { _, err := c.Commit(as(e.secret), forged("cct_guess")); return err }, codes.PermissionDenied},
		{"Commit unauthenticated", func() error { _, err := c.Commit(ctx, forged("")); return err }, codes.Unauthenticated},
		{"Commit as another agent", func() error { _, err := c.Commit(as(other), forged("")); return err }, codes.NotFound},
		{"GetIntent unauthenticated", func() error { _, err := c.GetIntent(ctx, getIntent); return err }, codes.Unauthenticated},
		{"GetIntent as another agent", func() error { _, err := c.GetIntent(as(other), getIntent); return err }, codes.NotFound},
		{"Reconcile unauthenticated", func() error { _, err := c.Reconcile(ctx, reconcile); return err }, codes.Unauthenticated},
		{"Reconcile with an agent credential", func() error { _, err := c.Reconcile(as(e.secret), reconcile); return err }, codes.Unauthenticated},
		{"Decide unauthenticated", func() error {
			_, err := c.Decide(ctx, &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_HttpRequest{HttpRequest: &countersignv1.HttpRequest{
				Method: "POST", Host: "api.stripe.com", Path: "/v1/refunds", Body: []byte("payment_intent=pi_forge&amount=1500")}}})
			return err
		}, codes.Unauthenticated},
	}
	for _, r := range refusals {
		if err := r.call(); status.Code(err) != r.want {
			t.Errorf("%s = %v, want %s", r.name, err, r.want)
		}
	}
	if it, atts, err := e.store.GetIntent(ctx, key); err != nil || it.State != intent.InFlight || atts[0].Response != nil {
		t.Fatalf("the agent's calls moved the intent: %+v %+v %v", it, atts, err)
	}
	// The agent re-sends the refund while the first is still at the rail
	// (on a loaded machine the 3 s at the rail can end within the loop:
	// then the answer is the ledger's replay of the applied refund, and
	// the journal below says whether anything was forwarded).
	for i := range 10 {
		if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_forge"}, "amount": {"1500"}}); r.Status == http.StatusOK {
			if it, _, err := e.store.GetIntent(ctx, key); err == nil && it.State == intent.Applied {
				break
			}
			t.Fatalf("re-send %d was forwarded: %d %s", i, r.Status, r.Body)
		}
	}
	select {
	case r := <-real:
		if r.Status != http.StatusOK {
			t.Fatalf("the real refund: %d %s", r.Status, r.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the real refund never came back")
	}
	// And again after it applied: answered from the ledger.
	for i := range 5 {
		if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_forge"}, "amount": {"1500"}}); r.Status != http.StatusOK {
			t.Fatalf("re-send %d after apply: %d %s", i, r.Status, r.Body)
		}
	}
	its := e.settle("pi_forge", 10*time.Second)
	if len(its) != 1 || its[0].State != intent.Applied || its[0].AttemptCount != 1 {
		t.Fatalf("intents = %+v", its)
	}
	if n := e.journal().effectsOn("pi_forge"); n != 1 {
		t.Fatalf("rail effects on pi_forge = %d, want exactly 1", n)
	}
}

// otherAgent is an agent of another owner, with its own valid credential.
func otherAgent(t *testing.T, store *ledger.Store) string {
	t.Helper()
	ctx := context.Background()
	o, _, _, err := ownerauth.Bootstrap(ctx, store, "other owner "+strconv.FormatInt(time.Now().UnixNano(), 36), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a, err := store.CreateAgent(ctx, o.ID, "other-bot")
	if err != nil {
		t.Fatal(err)
	}
	secret, hash, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.IssueCredential(ctx, a.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash); err != nil {
		t.Fatal(err)
	}
	return secret
}
