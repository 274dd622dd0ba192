package server

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// TestDecisionServiceRoundTrip drives the native API the way an SDK would:
// Decide, send the stamped request to the rail itself, Commit the answer,
// read the intent back, and see a duplicate answered from the ledger.
func TestDecisionServiceRoundTrip(t *testing.T) {
	h := railHarness(t)
	conn, err := grpc.NewClient(h.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := countersignv1.NewDecisionServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+h.secret)
	amount := int64(1200)
	decide := &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_Action{Action: &countersignv1.ProposedAction{
		Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_bench", ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND,
		Subject: "pi_bench", AmountMinor: &amount,
	}}}
	resp, err := client.Decide(ctx, decide)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW || resp.GetAttemptSeq() != 1 {
		t.Fatalf("Decide = %v", resp)
	}
	stamp := resp.GetStamps()["idempotency-key"]
	if stamp == "" || resp.GetStamps()["metadata[countersign_sik]"] != stamp {
		t.Fatalf("stamps = %v", resp.GetStamps())
	}
	for k, v := range resp.GetStamps() {
		if strings.EqualFold(k, "authorization") || strings.Contains(v, "sk_test") {
			t.Fatalf("the rail key left Countersign in the stamps: %s=%s", k, v)
		}
	}

	// The SDK sends the stamped request to the rail itself.
	form := url.Values{"payment_intent": {"pi_bench"}, "amount": {"1200"}, "metadata[countersign_sik]": {stamp}}
	req, _ := http.NewRequest(http.MethodPost, h.mockURL+"/v1/refunds", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer sk_test_mockrail")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", stamp)
	railResp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(railResp.Body)
	railResp.Body.Close()

	if !strings.HasPrefix(resp.GetCommitToken(), "cct_") {
		t.Fatalf("ALLOW without a commit token: %v", resp)
	}
	cr, err := client.Commit(ctx, &countersignv1.CommitRequest{RailAccount: "acct_bench", Sik: resp.GetIntent().GetSik(), AttemptSeq: 1,
		CommitToken: resp.GetCommitToken(), BodyStamped: true, Outcome: &countersignv1.CommitRequest_Response{Response: &countersignv1.HttpResponse{HttpStatus: int32(railResp.StatusCode),
			Headers: map[string]string{"content-type": "application/json"}, Body: body}}})
	if err != nil {
		t.Fatal(err)
	}
	if cr.GetIntent().GetState() != countersignv1.IntentState_INTENT_STATE_APPLIED || cr.GetAttempt().GetOutcome() != countersignv1.AttemptOutcome_ATTEMPT_OUTCOME_APPLIED {
		t.Fatalf("Commit = %v", cr)
	}
	gi, err := client.GetIntent(ctx, &countersignv1.DecisionServiceGetIntentRequest{RailAccount: "acct_bench", Sik: resp.GetIntent().GetSik()})
	if err != nil || len(gi.GetAttempts()) != 1 || gi.GetIntent().GetRailEntityId() == "" || gi.GetAttempts()[0].GetIdempotencyKey() != stamp {
		t.Fatalf("GetIntent = %v, %v", gi, err)
	}
	dup, err := client.Decide(ctx, decide)
	if err != nil || dup.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || dup.GetReasonCode() != "duplicate_applied" ||
		!strings.Contains(string(dup.GetStoredResponse().GetBody()), gi.GetIntent().GetRailEntityId()) {
		t.Fatalf("duplicate Decide = %v, %v", dup, err)
	}
	ownerCtx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+h.ownerToken)
	rec, err := client.Reconcile(ownerCtx, &countersignv1.ReconcileRequest{Target: &countersignv1.ReconcileRequest_Intent{Intent: &countersignv1.IntentKey{
		RailAccount: "acct_bench", Sik: resp.GetIntent().GetSik()}}})
	if err != nil || len(rec.GetFindings()) != 1 || rec.GetFindings()[0].GetOutcome() != countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_NOT_NEEDED {
		t.Fatalf("Reconcile of an applied intent = %v, %v", rec, err)
	}
}

func TestDecisionServiceRejectsBadInput(t *testing.T) {
	h := railHarness(t)
	conn, err := grpc.NewClient(h.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := countersignv1.NewDecisionServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+h.secret)
	cases := []struct {
		name string
		req  *countersignv1.DecideRequest
	}{
		{"no form", &countersignv1.DecideRequest{}},
		{"lower-case currency", &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_Action{Action: &countersignv1.ProposedAction{
			Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_bench", ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND,
			Subject: "pi_bench", Currency: "usd"}}}},
		{"zero amount", &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_Action{Action: &countersignv1.ProposedAction{
			Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_bench", ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND,
			Subject: "pi_bench", AmountMinor: new(int64)}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.Decide(ctx, tc.req)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("code = %v (%v)", st.Code(), err)
			}
			var reason string
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					reason = info.GetReason()
				}
			}
			if reason != "INVALID_ARGUMENT" {
				t.Fatalf("ErrorInfo reason = %q", reason)
			}
		})
	}
	// An unknown intent is NotFound with its reason.
	_, err = client.GetIntent(ctx, &countersignv1.DecisionServiceGetIntentRequest{RailAccount: "acct_bench", Sik: strings.Repeat("A", 32)})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("GetIntent unknown = %v", err)
	}
	// Without a credential, Decide refuses the caller: Unauthenticated,
	// not a verdict on the action.
	resp, err := client.Decide(context.Background(), &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_HttpRequest{HttpRequest: &countersignv1.HttpRequest{
		Method: "POST", Host: "api.stripe.com", Path: "/v1/refunds", Body: []byte("payment_intent=pi_bench&amount=5")}}})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "credential_missing") {
		t.Fatalf("Decide without a credential = %v, %v", resp, err)
	}
}
