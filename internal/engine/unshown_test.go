package engine

import (
	"context"
	"strings"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// A structured action through the native API is held to what the parsers
// hold a request through Envoy to: its subject and payee are rail ids, its
// extra members read as they are written. Else a held transfer whose
// subject carried terminal escapes, a bidi override or a line break was
// stored in its approval and shown to the owner as it was (found by a
// review: it redrew the real hold's row in `approvals list`).
func TestNativeActionIsShownAsWritten(t *testing.T) {
	r := newRigOn(t, rigRail{account: "acct_1", rail: sik.RailStripe, host: "api.stripe.com", key: mockrail.DefaultStripeKey,
		adapter: func() rail.Adapter { return stripe.New() }, mandateRail: countersignv1.Rail_RAIL_STRIPE,
		kind: countersignv1.ActionKind_ACTION_KIND_TRANSFER, currency: "USD"},
		func(m *countersignv1.Mandate) { m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED })
	ctx := context.Background()
	amount := int64(500)
	for _, tc := range []struct {
		name string
		a    rail.Action
		says string
	}{
		{"escape in the subject", rail.Action{Subject: "acct_2\x1b[1A\x1b[2K"}, "the subject"},
		{"bidi override in the subject", rail.Action{Subject: "acct_\u202e2kcol"}, "the subject"},
		{"line break in the payee", rail.Action{Subject: "acct_2", Payee: "acct_2\nstate  APPROVED"}, "payee"},
		{"C1 control in an extra value", rail.Action{Subject: "acct_2", Extra: map[string]string{"description_kind": "x\u009b2K"}}, `member "description_kind"`},
		{"zero-width space in an extra name", rail.Action{Subject: "acct_2", Extra: map[string]string{"a\u200bb": "x"}}, `member "a\u200bb"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.a
			a.Kind, a.Currency, a.AmountMinor = sik.KindTransfer, "USD", &amount
			out := r.e.DecideAction(ctx, Request{Source: SourceDecide, RequestID: "shown-" + tc.name, Credential: r.secret}, "acct_1", a)
			if out.Verdict != Block || out.ReasonCode != ReasonInvalidAction || !strings.Contains(out.Reason, tc.says) {
				t.Fatalf("%s %s: %s; want invalid_action naming %s", out.Verdict, out.ReasonCode, out.Reason, tc.says)
			}
			if strings.ContainsAny(out.Reason, "\x1b\n\u202e\u009b\u200b") {
				t.Errorf("the refusal quotes what it refuses raw: %q", out.Reason)
			}
		})
	}
	owner, err := r.store.AgentOwner(ctx, r.principal(t).Agent.ID)
	if err != nil {
		t.Fatal(err)
	}
	aps, err := r.store.ListApprovals(ctx, owner, "", "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(aps) != 0 {
		t.Fatalf("%d approvals were opened for refused actions (first: subject %q)", len(aps), aps[0].Subject)
	}
	// The same transfer with a rail id is held for the owner, as before.
	out := r.e.DecideAction(ctx, Request{Source: SourceDecide, RequestID: "shown-ok", Credential: r.secret}, "acct_1",
		rail.Action{Kind: sik.KindTransfer, Subject: "acct_2", Currency: "USD", AmountMinor: &amount})
	if out.Verdict != Hold {
		t.Fatalf("a transfer to acct_2: %s %s: %s; want HOLD", out.Verdict, out.ReasonCode, out.Reason)
	}
}
