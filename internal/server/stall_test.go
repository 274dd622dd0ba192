package server

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/extauthz"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestStalledAttemptCannotLeaveAfterItsLeaseLapsed: an allowed request is
// held between ext_authz and ext_proc (over HTTP/2 an agent can hold the
// end of its stream back; here the test speaks Envoy's protocols itself)
// until its lease lapses, the reconciler proves it absent, a retry of the
// same action is refused by the rail and the next one applies under a new
// key. Released then, the stale attempt must not leave: ext_proc stops it,
// and the rail holds one refund.
func TestStalledAttemptCannotLeaveAfterItsLeaseLapsed(t *testing.T) {
	h := railHarness(t, harnessOption{cfg: func(c *config.Config) {
		c.LeaseTTL = time.Second
		c.ReconcileDelay = 50 * time.Millisecond
		c.ReconcileInterval = 100 * time.Millisecond
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := egress(t, h)

	form := "payment_intent=pi_bench&amount=1000"
	resp, err := h.client.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{"rail_account": "acct_bench"},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "stalled", Method: "POST", Host: "stripe.egress.local:15001", Path: "/v1/refunds",
			Headers: map[string]string{"authorization": "Bearer " + h.secret, "content-type": "application/x-www-form-urlencoded",
				"content-length": strconv.Itoa(len(form)), extauthz.PartialBodyHeader: "false"},
			RawBody: []byte(form),
		}},
	}})
	if err != nil || resp.GetStatus().GetCode() != 0 {
		t.Fatalf("check: %v %v", resp, err)
	}
	ref, ok := extauthz.IntentFromMetadata(resp.GetDynamicMetadata())
	if !ok {
		t.Fatal("an ALLOW without the attempt's metadata")
	}
	mdc := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{extauthz.MetadataNamespace: resp.GetDynamicMetadata()}}
	stalled, err := extprocv3.NewExternalProcessorClient(dialTest(t, h.envoyAddr)).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stalled.Send(&extprocv3.ProcessingRequest{MetadataContext: mdc, Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.Recv(); err != nil {
		t.Fatal(err)
	}

	// The lease lapses and the reconciler proves the refund absent.
	waitForState(t, h, ref.SIK, "CONFIRMED_NOT_APPLIED", 30*time.Second)
	// A retry the rail declines (a definite refusal, so the intent is
	// reopened under the next stamp generation), then one that applies.
	if err := h.mock.SetFaults(mockrail.Fault{Profile: mockrail.FaultDeclineBeforeApply, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if declined := refundVia(t, base, h.secret, form); declined.status != 402 {
		t.Fatalf("the declined retry: %d %s", declined.status, declined.body)
	}
	if ok := refundVia(t, base, h.secret, form); ok.status != 200 {
		t.Fatalf("the retry: %d %s", ok.status, ok.body)
	}
	it, _ := h.intentState(t, ref.SIK)
	if it.State != "APPLIED" || it.AttemptCount <= ref.AttemptSeq || it.StampGeneration == 0 {
		t.Fatalf("after the retries the intent is %s on attempt %d, stamp generation %d; the test needs it applied by a later attempt under a new key",
			it.State, it.AttemptCount, it.StampGeneration)
	}

	// Released now, the stale attempt is stopped.
	if err := stalled.Send(&extprocv3.ProcessingRequest{MetadataContext: mdc, Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(form), EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	r, err := stalled.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r.GetImmediateResponse() == nil {
		t.Fatalf("the stale attempt %d was let go (%v): a second refund would leave under its old key", ref.AttemptSeq, r)
	}
	_ = stalled.CloseSend()
	if n := refundsOf(h.mock.Journal()); n != 1 {
		t.Fatalf("%d refunds on the rail for one action, want 1", n)
	}
}

func waitForState(t *testing.T, h *allowHarness, sik, state string, within time.Duration) {
	t.Helper()
	var last string
	if !wait.Until(within, func() bool {
		it, _ := h.intentState(t, sik)
		last = string(it.State)
		return last == state
	}) {
		t.Fatalf("intent %s is %s after %s, want %s", sik, last, within, state)
	}
}
