package gate

import (
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/sik"
)

var ladderOrder = []string{GateScope, GateProvenance, GateValue, GateLimits, GateAdvisory}

func gatesOf(rs []Result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Gate)
	}
	return out
}

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      func() Input
		verdict Verdict
		primary string   // reason code of Primary
		codes   []string // every gate's code, in ladder order
		reason  string   // substring of the primary reason
	}{
		{"refund allowed", refundIn, Allow, ReasonPassed, []string{ReasonPassed, ReasonPassed, ReasonPassed, ReasonPassed, ReasonPassed}, ""},
		{"payout allowed", payoutIn, Allow, ReasonPassed, nil, ""},
		{"refund above the refundable balance", func() Input { in := refundIn(); in.Referent.RefundableMinor = 189900; return in },
			Block, ReasonAmountExceedsRefundable, []string{ReasonPassed, ReasonPassed, ReasonAmountExceedsRefundable, ReasonPassed, ReasonNotEvaluated},
			"2,500.00 USD exceeds the 1,899.00 USD still refundable on pay_1002"},
		{"refund in the wrong currency", func() Input { in := refundIn(); in.Referent.Currency = "INR"; return in },
			Block, ReasonCurrencyMismatch, nil, "The request is in USD but pay_1002 is in INR."},
		{"payee off the allowlist", func() Input {
			in := payoutIn()
			in.Action.Payee, in.Action.Subject = "ba_9", "ba_9"
			in.Usage.Windows = counted(in)
			return in
		},
			Block, ReasonPayeeNotAllowed, nil, "Payee ba_9"},
		{"after the mandate expires", func() Input {
			in := refundIn()
			in.Now = t0.Add(31 * day)
			in.Credential.ExpiresAt = t0.Add(90 * day)
			return in
		},
			Block, ReasonMandateExpired, nil, "expired at 2026-03-31T12:00:00Z"},
		{"every reason is recorded", func() Input {
			in := refundIn()
			in.Mandate.ValidUntil = timestamppb.New(t0)
			in.APIVersion = "2019-01-01"
			in.Referent.RefundableMinor = 1000
			in.Usage.BudgetSpentMinor = 9900000
			return in
		}, Block, ReasonMandateExpired, []string{ReasonMandateExpired, ReasonAPIVersionMismatch, ReasonAmountExceedsRefundable, ReasonBudgetExceeded, ReasonNotEvaluated}, ""},
		{"propose-only credential is held", func() Input { in := payoutIn(); in.Credential.Scope = credential.ScopePropose; return in },
			Hold, ReasonCredentialProposeOnly, []string{ReasonCredentialProposeOnly, ReasonPassed, ReasonPassed, ReasonPassed, ReasonPassed}, "send the identical request again after approval"},
		{"approval_required and a new payee, approved", func() Input {
			in := payoutIn()
			in.Mandate.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
			in.Mandate.Advisory = &countersignv1.AdvisorySettings{Enabled: true}
			in.PayeeSeenBefore = false
			approve(&in)
			return in
		}, Allow, ReasonPassed, []string{ReasonPassed, ReasonPassed, ReasonPassed, ReasonApproved, ReasonApproved}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, rs := Evaluate(tc.in(), NewPayee{})
			if got := strings.Join(gatesOf(rs), ","); got != strings.Join(ladderOrder, ",") {
				t.Fatalf("gates %s, want %s", got, strings.Join(ladderOrder, ","))
			}
			p := Primary(rs)
			if v != tc.verdict || p.ReasonCode != tc.primary || !strings.Contains(p.Reason, tc.reason) {
				t.Fatalf("Evaluate = %v, primary %s %q; want %v %s containing %q\n%+v", v, p.ReasonCode, p.Reason, tc.verdict, tc.primary, tc.reason, rs)
			}
			for i, code := range tc.codes {
				if rs[i].ReasonCode != code {
					t.Errorf("%s: %s (%s), want %s", rs[i].Gate, rs[i].ReasonCode, rs[i].Reason, code)
				}
			}
		})
	}
}

// ledgerSim stands in for the ledger around Evaluate: one mandate, one
// agent, one payee, every action inside one day window, holds reserved on
// ALLOW and later posted or voided.
type ledgerSim struct {
	in           Input
	holds        []int64
	held, spent  int64
	calls, inWin int64 // window calls and amount of live holds
}

func (l *ledgerSim) input(amount int64) Input {
	in := l.in
	in.Action.AmountMinor = amount
	in.Usage = Usage{BudgetHeldMinor: l.held, BudgetSpentMinor: l.spent}
	in.Usage.Windows = counted(in, [2]int64{l.calls, l.inWin})
	return in
}

func (l *ledgerSim) reserve(amount int64) {
	l.holds = append(l.holds, amount)
	l.held += amount
	l.calls++
	l.inWin += amount
}

func TestStructuringIsBlocked(t *testing.T) {
	// Three payouts of 10,000.00 against a daily window of 25,000.00.
	base := payoutIn()
	base.Mandate.Windows = base.Mandate.Windows[:1]
	base.Mandate.Windows[0].MaxAmount = money(2500000, "USD")
	base.Mandate.Budgets = nil
	base.Mandate.RecurrenceLimit = 0
	l := &ledgerSim{in: base}
	for i, want := range []Verdict{Allow, Allow, Block} {
		v, rs := Evaluate(l.input(1000000))
		if v != want {
			t.Fatalf("payout %d: %v, want %v: %+v", i+1, v, want, rs)
		}
		if v == Allow {
			l.reserve(1000000)
			continue
		}
		p := Primary(rs)
		if p.ReasonCode != ReasonWindowAmountExceeded || !strings.Contains(p.Reason, "to 30,000.00 USD, over its limit of 25,000.00 USD") {
			t.Fatalf("payout 3 refused with %s %q", p.ReasonCode, p.Reason)
		}
	}
}

// For random sequences of proposals, posts and voids, everything Evaluate
// allowed keeps held + spent within the budget and the window within its
// limits, every refusal is exactly the one the numbers call for, and no sum
// ever wraps.
func TestBudgetAndWindowNeverOverrun(t *testing.T) {
	amounts := rapid.OneOf(rapid.Int64Range(1, 5000), rapid.Int64Range(1, math.MaxInt64), rapid.Int64Range(math.MaxInt64-5000, math.MaxInt64))
	limits := rapid.OneOf(rapid.Int64Range(0, 20000), rapid.Int64Range(0, math.MaxInt64), rapid.Just(int64(math.MaxInt64)))
	rapid.Check(t, func(t *rapid.T) {
		budget, winAmount := limits.Draw(t, "budget"), limits.Draw(t, "windowAmount")
		winCalls := rapid.Int32Range(0, 20).Draw(t, "windowCalls")
		in := payoutIn()
		m := in.Mandate
		m.Grants[1].MinAmountMinor, m.Grants[1].MaxAmountMinor = 1, math.MaxInt64
		m.Budgets = []*countersignv1.Money{money(budget, "USD")}
		m.Windows = []*countersignv1.Window{{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT, Duration: durationpb.New(day), MaxCalls: winCalls, MaxAmount: money(winAmount, "USD")}}
		m.FeeBudget, m.RecurrenceLimit = nil, 0
		l := &ledgerSim{in: in}

		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 3).Draw(t, "op"); {
			case op <= 1 || len(l.holds) == 0:
				amount := amounts.Draw(t, "amount")
				v, rs := Evaluate(l.input(amount))
				budgetSum := sum(l.held, l.spent, amount)
				winSum := sum(l.inWin, amount)
				callsOK := winCalls == 0 || l.calls < int64(winCalls)
				overflow := !budgetSum.IsInt64() || !winSum.IsInt64()
				fits := callsOK && !overflow && budgetSum.Int64() <= budget && winSum.Int64() <= winAmount
				if (v == Allow) != fits {
					t.Fatalf("amount %d with held %d spent %d budget %d, window %d/%d calls %d/%d: %v %+v",
						amount, l.held, l.spent, budget, l.inWin, winAmount, l.calls, winCalls, v, Primary(rs))
				}
				if v == Allow {
					l.reserve(amount)
					continue
				}
				code := Primary(rs).ReasonCode
				if overflow && callsOK && code != ReasonAmountOverflow {
					t.Fatalf("an overflowing sum was refused as %s, want %s", code, ReasonAmountOverflow)
				}
				if code != ReasonWindowCallsExceeded && code != ReasonWindowAmountExceeded && code != ReasonBudgetExceeded && code != ReasonAmountOverflow {
					t.Fatalf("refused with unexpected %s", code)
				}
			default: // settle the oldest hold: post (APPLIED) or void (proven not applied)
				a := l.holds[0]
				l.holds = l.holds[1:]
				l.held -= a
				if op == 2 {
					l.spent += a
				} else {
					l.calls--
					l.inWin -= a
				}
			}
			if total := sum(l.held, l.spent); total.Cmp(big.NewInt(budget)) > 0 || l.held < 0 || l.spent < 0 {
				t.Fatalf("held %d + spent %d = %s exceeds the budget %d", l.held, l.spent, total, budget)
			}
			if l.inWin > winAmount || (winCalls > 0 && l.calls > int64(winCalls)) {
				t.Fatalf("window holds %d in %d calls, over %d in %d", l.inWin, l.calls, winAmount, winCalls)
			}
		}
	})
}

func sum(xs ...int64) *big.Int {
	s := new(big.Int)
	for _, x := range xs {
		s.Add(s, big.NewInt(x))
	}
	return s
}

// Evaluate never panics, always answers five results in ladder order, and
// allows nothing a deterministic gate would not, whatever the input.
func TestEvaluateOnArbitraryInput(t *testing.T) {
	str := rapid.SampledFrom([]string{"", "agt_1", "acct_1", "ba_1", "USD", "EUR", "pay_1002"})
	i64 := rapid.OneOf(rapid.Int64(), rapid.Int64Range(-2, 3), rapid.Just(int64(math.MaxInt64)))
	tm := rapid.Custom(func(t *rapid.T) time.Time {
		return t0.Add(time.Duration(rapid.Int64Range(-40, 40).Draw(t, "days")) * day)
	})
	rapid.Check(t, func(t *rapid.T) {
		in := Input{
			Now:         rapid.SampledFrom([]time.Time{t0, {}}).Draw(t, "now"),
			Credential:  Credential{ID: "c", Scope: rapid.SampledFrom([]credential.Scope{"", credential.ScopePropose, credential.ScopeExecute}).Draw(t, "scope"), ExpiresAt: tm.Draw(t, "credExp"), Revoked: rapid.Bool().Draw(t, "credRevoked")},
			Agent:       Agent{ID: str.Draw(t, "agent"), Revoked: rapid.Bool().Draw(t, "agentRevoked")},
			RailAccount: str.Draw(t, "account"), Rail: rapid.SampledFrom([]sik.Rail{"", sik.RailStripe, RailMCP}).Draw(t, "rail"),
			Host: str.Draw(t, "host"), MCPTool: str.Draw(t, "tool"),
			Action: Action{Kind: rapid.SampledFrom([]sik.Kind{"", sik.KindRefund, sik.KindPayout, sik.KindTransfer}).Draw(t, "kind"),
				Subject: str.Draw(t, "subject"), AmountMinor: i64.Draw(t, "amount"), FullRefund: rapid.Bool().Draw(t, "full"),
				Currency: str.Draw(t, "currency"), Payee: str.Draw(t, "payee")},
			Referent:               Referent{RefundableMinor: i64.Draw(t, "refundable"), Currency: str.Draw(t, "refCurrency")},
			LedgerOutstandingMinor: i64.Draw(t, "outstanding"),
			Usage:                  Usage{BudgetHeldMinor: i64.Draw(t, "held"), BudgetSpentMinor: i64.Draw(t, "spent"), FeeSpentMinor: i64.Draw(t, "fees"), SubjectActions: i64.Draw(t, "subjectActions")},
			PayeeSeenBefore:        rapid.Bool().Draw(t, "seen"),
		}
		if rapid.Bool().Draw(t, "hasMandate") {
			in.Mandate = testMandate()
			in.Mandate.Mode = countersignv1.MandateMode(rapid.Int32Range(0, 3).Draw(t, "mode"))
			in.Mandate.Advisory = &countersignv1.AdvisorySettings{Enabled: rapid.Bool().Draw(t, "advisory")}
			if rapid.Bool().Draw(t, "countWindows") {
				in.Usage.Windows = counted(in, [2]int64{i64.Draw(t, "winCalls"), i64.Draw(t, "winAmount")})
			}
		}
		v, rs := Evaluate(in, NewPayee{}, panicky{})
		if len(rs) != 5 || strings.Join(gatesOf(rs), ",") != strings.Join(ladderOrder, ",") {
			t.Fatalf("results %+v", rs)
		}
		if v == Allow {
			for _, r := range rs[:4] {
				if r.Verdict != Allow {
					t.Fatalf("ALLOW over %+v", r)
				}
			}
		}
		for _, r := range rs {
			if r.ReasonCode == "" || r.Reason == "" {
				t.Fatalf("result without a reason: %+v", r)
			}
		}
	})
}
