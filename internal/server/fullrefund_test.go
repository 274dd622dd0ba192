package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/envoystandin"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// TestAFullRefundMovesNoMoreThanItsHold: a refund without an amount is
// valued at what is refundable when it is decided (40.00 of a 100.00
// payment the merchant refunded 60.00 of) and held at that. The merchant's
// refund fails while the agent's request is on its way, so 100.00 is
// refundable when it reaches the rail: it refunds 40.00, what the ledger
// holds and the budget counted, because the request leaves with that
// amount written in (found by a review: it refunded 100.00 under a hold of
// 40.00). The native Decide answer names the amount the same way.
func TestAFullRefundMovesNoMoreThanItsHold(t *testing.T) {
	var mock atomic.Pointer[mockrail.Server]
	var merchantRefund atomic.Value // string
	var failOnce sync.Once
	failed := make(chan error, 1)
	grow := func(_ context.Context, ev mockrail.HookEvent) {
		// The agent's refund, stamped, at the rail but not yet applied.
		if ev.Stage != mockrail.StageBeforeApply || ev.Method != http.MethodPost || ev.Path != "/v1/refunds" || ev.IdempotencyKey == "" {
			return
		}
		failOnce.Do(func() { failed <- mock.Load().FailRefund(merchantRefund.Load().(string)) })
	}
	h := bareRailHarness(t, harnessOption{mock: []mockrail.Option{
		mockrail.WithPayments(mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_full", Amount: 10000, Currency: "usd"}),
		mockrail.WithHook(grow)}})
	mock.Store(h.mock)
	applyMandateTo(t, h, mandateFor(h))

	// The merchant refunds 60.00 itself, with no idempotency key.
	merchantRefund.Store(h.merchantRefund(t, "pi_full", 6000))

	p, err := envoystandin.Start(context.Background(), envoystandin.Config{
		ExtAuthz: h.envoyAddr, ExtProc: h.envoyAddr, MaxRequestBytes: 64 << 10, AllowPartialMessage: true,
		Timeout: 30 * time.Second, ExtProcMessageTimeout: 30 * time.Second,
		Routes: []envoystandin.Route{{Prefix: "*", Upstream: h.mockURL, HostRewrite: "api.stripe.com", Timeout: 20 * time.Second,
			ContextExtensions: map[string]string{"rail_account": "acct_bench"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if a := refundVia(t, "http://"+p.Addr(), h.secret, "payment_intent=pi_full"); a.status != http.StatusOK {
		t.Fatalf("the full refund answered %d %.300s", a.status, a.body)
	}
	if err := <-failed; err != nil {
		t.Fatalf("the merchant's refund did not fail: %v", err)
	}
	var agents []mockrail.Effect
	for _, e := range h.mock.Journal().Effects {
		if e.Kind == mockrail.KindRefund && e.IdempotencyKey != "" {
			agents = append(agents, e)
		}
	}
	its, err := h.store.OwnerIntents(context.Background(), h.ownerID, ledger.IntentFilter{}, nil, 10)
	if err != nil || len(its) != 1 {
		t.Fatalf("intents = %+v, %v", its, err)
	}
	it := its[0]
	if it.AmountMinor != 4000 || it.State != intent.Applied {
		t.Fatalf("the intent holds %d and is %s; want 4000 APPLIED", it.AmountMinor, it.State)
	}
	if len(agents) != 1 || agents[0].Amount != it.AmountMinor {
		t.Fatalf("the rail refunded %+v for an intent holding %d", agents, it.AmountMinor)
	}

	// Natively the caller writes the request: the answer names the amount.
	mock.Store(nil) // no more growth
	failOnce.Do(func() {})
	d := h.decide(t, &countersignv1.ProposedAction{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, Subject: "pi_full", Distinct: "the rest"})
	if d.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW || d.GetStamps()["amount"] != "6000" {
		t.Fatalf("the native full refund = %s %s, stamps %v; want ALLOW naming amount 6000", d.GetVerdict(), d.GetReasonCode(), d.GetStamps())
	}
}

// TestAReopenedFullRefundIsJudgedAtWhatLeaves: a full refund the rail
// declined is sent again, once the refundable balance has grown back; it
// leaves for the amount its intent holds, and is judged, shown to the owner
// and counted in the budget at that, not at what is refundable now (found
// by a review: 10000 counted spent while 4000 left).
func TestAReopenedFullRefundIsJudgedAtWhatLeaves(t *testing.T) {
	h := bareRailHarness(t, harnessOption{mock: []mockrail.Option{mockrail.WithPayments(
		mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_full", Amount: 10000, Currency: "usd"})}})
	m := mandateFor(h)
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	m.Budgets = []*countersignv1.Money{{AmountMinor: 50000, Currency: "USD"}}
	hash := applyMandateTo(t, h, m)
	base := egress(t, h)
	ctx := context.Background()

	merchantRefund := h.merchantRefund(t, "pi_full", 6000)

	approve := func(want int64) {
		t.Helper()
		l, err := owners(h).ListApprovals(ctx, &countersignv1.ListApprovalsRequest{State: countersignv1.ApprovalState_APPROVAL_STATE_PENDING})
		if err != nil || len(l.GetApprovals()) != 1 {
			t.Fatalf("pending approvals: %v, %v", l.GetApprovals(), err)
		}
		ap := l.GetApprovals()[0]
		if got := ap.GetAmount().GetAmountMinor(); got != want {
			t.Fatalf("the owner is shown %d, want %d", got, want)
		}
		if _, err := owners(h).ApproveApproval(ctx, &countersignv1.ApproveApprovalRequest{ApprovalId: ap.GetApprovalId(),
			RequestFingerprint: ap.GetRequestFingerprint()}); err != nil {
			t.Fatal(err)
		}
	}
	const full = "payment_intent=pi_full"
	if a := refundVia(t, base, h.secret, full); a.headers.Get("X-Countersign-Verdict") != "HOLD" {
		t.Fatalf("the first send = %d %.200s, want HOLD", a.status, a.body)
	}
	approve(4000)
	if err := h.mock.SetFaults(mockrail.Fault{Profile: mockrail.FaultDeclineBeforeApply, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if a := refundVia(t, base, h.secret, full); a.status != http.StatusPaymentRequired {
		t.Fatalf("the approved send = %d %.200s, want the rail's decline", a.status, a.body)
	}
	// The merchant's refund fails: 10000 is refundable again.
	if err := h.mock.FailRefund(merchantRefund); err != nil {
		t.Fatal(err)
	}
	if a := refundVia(t, base, h.secret, full); a.headers.Get("X-Countersign-Verdict") != "HOLD" {
		t.Fatalf("the retry = %d %.200s, want HOLD", a.status, a.body)
	}
	approve(4000)
	if a := refundVia(t, base, h.secret, full); a.status != http.StatusOK {
		t.Fatalf("the approved retry = %d %.200s", a.status, a.body)
	}
	var moved int64
	for _, e := range h.mock.Journal().Effects {
		if e.Kind == mockrail.KindRefund && e.EntityID != merchantRefund {
			moved += e.Amount
		}
	}
	u, err := owners(h).GetMandateUsage(ctx, &countersignv1.GetMandateUsageRequest{MandateHash: hash})
	if err != nil {
		t.Fatal(err)
	}
	var spent int64
	for _, b := range u.GetUsage().GetBudgets() {
		spent += b.GetSpentMinor()
	}
	if moved != 4000 || spent != moved {
		t.Fatalf("the rail refunded %d and the budget counts %d spent; want 4000 both", moved, spent)
	}
}

// merchantRefund refunds amount of Stripe payment pi at the mock rail with
// the rail's own key, as the merchant's dashboard would (no idempotency
// key, nothing of Countersign's), and returns the refund's id.
func (h *allowHarness) merchantRefund(t *testing.T, pi string, amount int64) string {
	t.Helper()
	form := url.Values{"payment_intent": {pi}, "amount": {strconv.FormatInt(amount, 10)}}
	req, err := http.NewRequest(http.MethodPost, h.mockURL+"/v1/refunds", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+mockrail.DefaultStripeKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK || r.ID == "" {
		t.Fatalf("the merchant's refund = %d %+v, %v", resp.StatusCode, r, err)
	}
	return r.ID
}
