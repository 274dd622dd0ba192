package mandate

import (
	"errors"
	"strings"
	"testing"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

func TestTemplate(t *testing.T) {
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	base := Answers{
		Rail:         countersignv1.Rail_RAIL_STRIPE,
		RailAccount:  "acct_1Nv0FGQ9RKHgCVdK",
		AgentID:      "agt_k3v9q2m1x7c4b8n6z5wd",
		Purpose:      `Refunds for "damaged" orders`,
		Actions:      []countersignv1.ActionKind{countersignv1.ActionKind_ACTION_KIND_REFUND},
		Currency:     "USD",
		MaxPerAction: 5000,
		DailyCap:     20000,
		Mode:         countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Approver:     "ops@example.com\nsecond line",
		ValidFrom:    from,
		ValidUntil:   from.AddDate(0, 0, 30),
	}
	cases := []struct {
		name   string
		change func(*Answers)
		want   []string // substrings of the YAML
	}{
		{"refunds, budgeted", func(*Answers) {}, []string{
			"mode: budgeted\n", "# Approver: ops@example.com second line", "action_kind: refund",
			"max_amount_minor: 5000\n", "max_amount: {amount_minor: 20000, currency: USD}",
			`purpose: "Refunds for \"damaged\" orders"`, "# allowed_payees: []",
		}},
		{"payouts need payees", func(a *Answers) {
			a.Actions = []countersignv1.ActionKind{countersignv1.ActionKind_ACTION_KIND_PAYOUT, countersignv1.ActionKind_ACTION_KIND_TRANSFER}
			a.Payees = []string{"ba_1001", "acct_2"}
			a.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
		}, []string{"mode: approval_required\n", "allowed_payees:\n  - \"ba_1001\"\n  - \"acct_2\"\n", "action_kind: transfer"}},
		{"razorpay in rupees", func(a *Answers) {
			a.Rail = countersignv1.Rail_RAIL_RAZORPAY
			a.Currency = "INR"
		}, []string{"rail: razorpay\n", "currencies: [INR]", "as razorpay counts them (1250 means 12.50 INR)"}},
		// Stripe reads MGA as zero-decimal (ISO 4217 gives it two), so the
		// explanation follows the rail, not ISO 4217.
		{"ariary on stripe", func(a *Answers) { a.Currency = "MGA" }, []string{"as stripe counts them (1250 means 1,250 MGA)"}},
		{"ariary on razorpay", func(a *Answers) {
			a.Rail = countersignv1.Rail_RAIL_RAZORPAY
			a.Currency = "MGA"
		}, []string{"as razorpay counts them (1250 means 12.50 MGA)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := base
			tc.change(&a)
			y, err := Template(a)
			if err != nil {
				t.Fatalf("Template: %v", err)
			}
			if p := Lint(y); p != nil {
				t.Fatalf("template does not lint: %v\n%s", p, y)
			}
			m, err := Parse(y)
			if err != nil {
				t.Fatal(err)
			}
			if m.GetAgentId() != a.AgentID || m.GetWindows()[0].GetMaxAmount().GetAmountMinor() != a.DailyCap {
				t.Errorf("template lost an answer: %v", m)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(y), w) {
					t.Errorf("template lacks %q:\n%s", w, y)
				}
			}
		})
	}
	t.Run("payouts without payees are refused", func(t *testing.T) {
		a := base
		a.Actions = []countersignv1.ActionKind{countersignv1.ActionKind_ACTION_KIND_PAYOUT}
		_, err := Template(a)
		var perr *Error
		if !errors.As(err, &perr) || perr.Problems[0].Rule != "mandate.payees_required" {
			t.Errorf("Template = %v, want mandate.payees_required", err)
		}
	})
	t.Run("no actions", func(t *testing.T) {
		a := base
		a.Actions = nil
		if _, err := Template(a); err == nil {
			t.Error("Template with no actions succeeded")
		}
	})
}
