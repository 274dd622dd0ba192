package engine

import (
	"context"
	"strings"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// newRazorpayRig is newRig on a RazorpayX account (rzp_1) whose mandate
// grants INR payouts.
func newRazorpayRig(t *testing.T, shape ...func(*countersignv1.Mandate)) *rig {
	t.Helper()
	return newRigOn(t, rigRail{account: "rzp_1", rail: sik.RailRazorpay, host: "api.razorpay.com",
		key: mockrail.DefaultRazorpayKeyID + ":" + mockrail.DefaultRazorpayKeySecret, adapter: func() rail.Adapter { return razorpay.New() },
		mandateRail: countersignv1.Rail_RAIL_RAZORPAY, kind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, currency: "INR"}, shape...)
}

// razorpayPayout is a RazorpayX payout of 10.00 INR with the JSON purpose
// and, when notes is not "", those notes.
func (r *rig) razorpayPayout(purpose, notes string) Request {
	body := `{"account_number":"7878780080316316","fund_account_id":"fa_00000000000001","amount":1000,"currency":"INR","mode":"IMPS","purpose":` + purpose
	if notes != "" {
		body += `,"notes":` + notes
	}
	return Request{Source: SourceExtAuthz, RequestID: "req", Credential: r.secret, Method: "POST", Host: "api.razorpay.com",
		Path: "/v1/payouts", Headers: map[string]string{"content-type": "application/json"}, Body: []byte(body + "}")}
}

// TestFreeTextPolicySeesARazorpayPurpose: a RazorpayX payout's purpose is
// keyed, and was any string of up to 100 characters, so under free_text:
// refuse a card number left in it while the same text in notes was
// refused (a review's finding). A purpose is now the name of one (refused
// otherwise, naming the member); one of Razorpay's defaults is no free
// text, and any other (a purpose made in the Dashboard, or a name the model
// composed) is, for free_text to refuse or hold.
func TestFreeTextPolicySeesARazorpayPurpose(t *testing.T) {
	ctx := context.Background()
	t.Run("refuse", func(t *testing.T) {
		r := newRazorpayRig(t, func(m *countersignv1.Mandate) { m.FreeText = countersignv1.FreeText_FREE_TEXT_REFUSE })
		expect(t, r.e.Decide(ctx, r.razorpayPayout(`"payout"`, `{"x":"4111111111111111 12/29 123"}`)), Block, "free_text_refused")
		card := r.e.Decide(ctx, r.razorpayPayout(`"4111111111111111 12/29 123"`, ""))
		expect(t, card, Block, ReasonBodyUnparseable)
		if !strings.Contains(card.Reason, "purpose") || card.Intent != nil {
			t.Fatalf("refusal %q (intent %+v) does not name purpose, or left an intent", card.Reason, card.Intent)
		}
		named := r.e.Decide(ctx, r.razorpayPayout(`"a4111111111111111 1229 123"`, ""))
		expect(t, named, Block, "free_text_refused")
		if !strings.Contains(named.Reason, "purpose") || named.Intent != nil {
			t.Fatalf("refusal %q (intent %+v) does not name purpose, or left an intent", named.Reason, named.Intent)
		}
		expect(t, r.e.Decide(ctx, r.razorpayPayout(`"vendor bill"`, "")), Allow, "allowed") // a default purpose is not free text
	})
	t.Run("hold", func(t *testing.T) {
		r := newRazorpayRig(t, func(m *countersignv1.Mandate) { m.FreeText = countersignv1.FreeText_FREE_TEXT_HOLD })
		expect(t, r.e.Decide(ctx, r.razorpayPayout(`"office rent"`, "")), Hold, "free_text_held")
		if rows := r.approvalRows(t); len(rows) != 1 || rows[0].labels != `{"purpose":"office rent"}` {
			t.Fatalf("approvals = %+v; want one showing the purpose", rows)
		}
		r.approveLive(t)
		expect(t, r.e.Decide(ctx, r.razorpayPayout(`"office rent"`, "")), Allow, "allowed")
	})
	t.Run("allow", func(t *testing.T) {
		r := newRazorpayRig(t)
		expect(t, r.e.Decide(ctx, r.razorpayPayout(`"office rent"`, "")), Allow, "allowed")
	})
}
