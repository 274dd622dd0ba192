package server

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/api"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/engine"
)

// TestNativePayeeIsWhomTheActionPays: a native structured payout that
// names a payee other than its destination is refused before any gate;
// without a payee it is its destination's; a native refund names none.
// Before, the gates and the owner's approval card judged the payee the
// caller named: a payout to the agent's own account, shown as one to a
// payee the owner trusts, was approved, and the same payout sent through
// Envoy (keyed the same) left on that approval.
func TestNativePayeeIsWhomTheActionPays(t *testing.T) {
	h := bareRailHarness(t)
	now := time.Now().Truncate(time.Second)
	applyMandateTo(t, h, &countersignv1.Mandate{
		Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_bench", AgentId: h.agentID, Purpose: "payouts to one account",
		ValidFrom: timestamppb.New(now.Add(-time.Hour)), ValidUntil: timestamppb.New(now.Add(24 * time.Hour)),
		Mode: countersignv1.MandateMode_MANDATE_MODE_BUDGETED, AllowedPayees: []string{"ba_good"},
		Grants: []*countersignv1.Grant{
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, MaxAmountMinor: 1 << 40, Currencies: []string{"USD"}},
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 1 << 40, Currencies: []string{"USD"}},
		},
	})
	payout := func(subject, payee string) *countersignv1.DecideResponse {
		amount := int64(1000)
		return h.decide(t, &countersignv1.ProposedAction{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, Subject: subject, Payee: payee,
			AmountMinor: &amount, Currency: "USD", Extra: map[string]string{"method": "standard"}})
	}
	if d := payout("ba_evil", "ba_good"); d.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || d.GetReasonCode() != engine.ReasonInvalidAction ||
		!strings.Contains(d.GetReason(), `payee "ba_good" is not whom this payout pays`) {
		t.Fatalf("a payout to ba_evil naming payee ba_good = %s %s: %s; want it refused", d.GetVerdict(), d.GetReasonCode(), d.GetReason())
	}
	if d := payout("ba_evil", ""); d.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || d.GetReasonCode() != "payee_not_allowed" {
		t.Fatalf("a payout to ba_evil without a payee = %s %s; want the allowlist to judge ba_evil", d.GetVerdict(), d.GetReasonCode())
	}
	if d := payout("ba_good", "ba_good"); d.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("a payout to ba_good naming it = %s %s: %s", d.GetVerdict(), d.GetReasonCode(), d.GetReason())
	}
	r := refund("pi_bench", 100, "")
	r.Payee = "ba_good"
	if d := h.decide(t, r); d.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || d.GetReasonCode() != engine.ReasonInvalidAction {
		t.Fatalf("a refund naming a payee = %s %s", d.GetVerdict(), d.GetReasonCode())
	}
}

// TestNativeReportsAreBounded: a native caller's reports of the rail's
// answer take decisions from the agent's bucket, and a reported body is at
// most api.MaxReportedBody. Before, one allowed attempt's commit token
// could be reported with a 409 and a fresh 400 KiB body as fast as the
// agent liked while its lease lasted: a review wrote 213 MiB of WAL in
// 10 s.
func TestNativeReportsAreBounded(t *testing.T) {
	// 4 at once, then one each 1000 s: no refill during the test.
	h := railHarness(t, harnessOption{cfg: func(c *config.Config) {
		c.AgentDecisionRate, c.AgentDecisionBurst = 0.001, 4
		c.AgentRailReadRate = 0
	}})
	d := h.decide(t, refund("pi_bench", 100, ""))
	if d.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("the refund = %s %s", d.GetVerdict(), d.GetReasonCode())
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+h.secret)
	client := countersignv1.NewDecisionServiceClient(h.conn)
	report := func(body []byte) error {
		_, err := client.Commit(ctx, &countersignv1.CommitRequest{RailAccount: "acct_bench", Sik: d.GetIntent().GetSik(),
			AttemptSeq: d.GetAttemptSeq(), CommitToken: d.GetCommitToken(),
			Outcome: &countersignv1.CommitRequest_Response{Response: &countersignv1.HttpResponse{HttpStatus: 409, Body: body}}})
		return err
	}
	if err := report(make([]byte, api.MaxReportedBody+1)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a report with a body over %d bytes = %v; want InvalidArgument", api.MaxReportedBody, err)
	}
	// The Decide took one decision; three reports are left.
	for i := range 3 {
		if err := report([]byte(`{"error":{"type":"idempotency_error","code":"idempotency_key_in_use"}}`)); err != nil {
			t.Fatalf("report %d within the bucket: %v", i, err)
		}
	}
	err := report([]byte(`{}`))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a report past the agent's bucket = %v; want ResourceExhausted", err)
	}
}

// TestNativeStorageIsBounded: what a native caller sends and Countersign
// keeps with an intent or an attempt is bounded as a request through
// Envoy is (found by a review: a structured action's extra of 480 KiB,
// a reported answer's 55 headers of 8 KiB and a 400 KiB MCP call body
// were each kept whole): a body over --max-request-bytes is decided as
// truncated, extra over 4 KiB and a reported answer's headers over 16 KiB
// are refused; what fits is taken.
func TestNativeStorageIsBounded(t *testing.T) {
	h := railHarness(t, harnessOption{cfg: func(c *config.Config) { c.MaxRequestBytes = 4096 }})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+h.secret)
	client := countersignv1.NewDecisionServiceClient(h.conn)
	httpDecide := func(body string) *countersignv1.DecideResponse {
		t.Helper()
		resp, err := client.Decide(ctx, &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_HttpRequest{HttpRequest: &countersignv1.HttpRequest{
			Method: "POST", Host: "api.stripe.com", Path: "/v1/refunds", Body: []byte(body),
			Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"}}}})
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		return resp
	}
	// Padding the form with members Stripe ignores is refused anyway; an
	// amount with leading zeros is a body of any length the parser reads.
	long := "payment_intent=pi_bench&amount=" + strings.Repeat("0", 4096) + "100"
	if d := httpDecide(long); d.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || d.GetReasonCode() != engine.ReasonBodyTruncated {
		t.Fatalf("a body of %d bytes over a max-request-bytes of 4096 = %s %s", len(long), d.GetVerdict(), d.GetReasonCode())
	}

	extra := map[string]string{}
	for i := range 5 {
		extra["x"+strconv.Itoa(i)] = strings.Repeat("e", 1000)
	}
	a := refund("pi_bench", 100, "")
	a.Extra = extra
	if d := h.decide(t, a); d.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || d.GetReasonCode() != engine.ReasonInvalidAction ||
		!strings.Contains(d.GetReason(), "extra comes to") {
		t.Fatalf("extra of 5,000 bytes = %s %s: %s", d.GetVerdict(), d.GetReasonCode(), d.GetReason())
	}

	d := httpDecide("payment_intent=pi_bench&amount=100")
	if d.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("the refund = %s %s: %s", d.GetVerdict(), d.GetReasonCode(), d.GetReason())
	}
	report := func(headers map[string]string) error {
		_, err := client.Commit(ctx, &countersignv1.CommitRequest{RailAccount: "acct_bench", Sik: d.GetIntent().GetSik(),
			AttemptSeq: d.GetAttemptSeq(), CommitToken: d.GetCommitToken(),
			Outcome: &countersignv1.CommitRequest_Response{Response: &countersignv1.HttpResponse{HttpStatus: 409, Headers: headers,
				Body: []byte(`{"error":{"type":"idempotency_error","code":"idempotency_key_in_use"}}`)}}})
		return err
	}
	big := map[string]string{}
	for i := range 3 {
		big["x-junk-"+strconv.Itoa(i)] = strings.Repeat("h", 6000)
	}
	if err := report(big); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a report with %d bytes of headers = %v; want InvalidArgument", engine.HeaderBytes(big), err)
	}
	if err := report(map[string]string{"request-id": "req_1"}); err != nil {
		t.Fatalf("a report with a request id: %v", err)
	}
}
