package gate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/sik"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

func money(amount int64, currency string) *countersignv1.Money {
	return &countersignv1.Money{AmountMinor: amount, Currency: currency}
}

// testMandate is a valid budgeted Stripe mandate for agt_1 on acct_1.
func testMandate() *countersignv1.Mandate {
	return &countersignv1.Mandate{
		Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_1", AgentId: "agt_1", Purpose: "support refunds and supplier payouts",
		ValidFrom: timestamppb.New(t0.Add(-day)), ValidUntil: timestamppb.New(t0.Add(30 * day)),
		Mode: countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MinAmountMinor: 100, MaxAmountMinor: 500000, Currencies: []string{"USD"}},
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, MinAmountMinor: 100, MaxAmountMinor: 2000000, Currencies: []string{"USD", "EUR"}},
		},
		AllowedPayees: []string{"ba_1", "ba_2"},
		Budgets:       []*countersignv1.Money{money(10000000, "USD")},
		Windows: []*countersignv1.Window{
			{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT, Duration: durationpb.New(day), MaxCalls: 10, MaxAmount: money(2500000, "USD")},
			{Scope: countersignv1.WindowScope_WINDOW_SCOPE_PAYEE, Duration: durationpb.New(time.Hour), MaxCalls: 3},
		},
		FeeBudget:       money(50000, "USD"),
		RecurrenceLimit: 5,
		Provenance:      &countersignv1.Provenance{RailHost: "api.stripe.com", ApiVersion: "2024-06-20"},
	}
}

// refundIn is an input every gate allows: a 2,500.00 USD (250000) refund of pay_1002.
func refundIn() Input {
	in := Input{
		Now:         t0,
		Credential:  Credential{ID: "cred_1", Scope: credential.ScopeExecute, ExpiresAt: t0.Add(90 * day)},
		Agent:       Agent{ID: "agt_1"},
		Mandate:     testMandate(),
		MandateHash: "3f9a0c1d2e4b5a6978877665544332211",
		RailAccount: "acct_1", Rail: sik.RailStripe, Host: "api.stripe.com", APIVersion: "2024-06-20",
		Action:   Action{Kind: sik.KindRefund, Subject: "pay_1002", AmountMinor: 250000, Currency: "USD"},
		Referent: Referent{AmountMinor: 500000, RefundableMinor: 500000, Currency: "USD", Payee: "cus_1"},
		Usage:    Usage{BudgetHeldMinor: 100000, BudgetSpentMinor: 200000, FeeSpentMinor: 1200, SubjectActions: 1},
	}
	in.Usage.Windows = counted(in)
	return in
}

// payoutIn is an input every gate allows: a 10,000.00 USD (1000000) payout to ba_1.
func payoutIn() Input {
	in := refundIn()
	in.Action = Action{Kind: sik.KindPayout, Subject: "ba_1", AmountMinor: 1000000, Currency: "USD", Payee: "ba_1"}
	in.Referent = Referent{Currency: "USD", Payee: "ba_1"}
	in.PayeeSeenBefore = true
	in.Usage.Windows = counted(in)
	return in
}

// counted is Usage.Windows for in's mandate, each window holding the
// {calls, amount} given for it, zero for the rest.
func counted(in Input, use ...[2]int64) []WindowUsage {
	specs := WindowSpecs(in)
	ws := make([]WindowUsage, len(specs))
	for i, s := range specs {
		ws[i].WindowSpec = s
		if i < len(use) {
			ws[i].Calls, ws[i].AmountMinor = use[i][0], use[i][1]
		}
	}
	return ws
}

// approve gives in an unexpired approval of its own fingerprint.
func approve(in *Input) {
	in.Fingerprint, in.ApprovedFingerprint, in.ApprovalExpiresAt = "fp_7c1e0b9d2a4f6e8c", "fp_7c1e0b9d2a4f6e8c", in.Now.Add(time.Hour)
}

// gateCase is one named case of a gate's table test.
type gateCase struct {
	name    string
	mod     func(in *Input)
	verdict Verdict
	code    string
	// contains are substrings the reason must carry (the numbers).
	contains []string
}

// seenCodes collects every reason code a table test asserted, so TestMain
// can check that each Reason* constant has a named case.
var seenCodes = map[string]bool{}

func runGate(t *testing.T, base func() Input, check func(Input) Result, gate string, cases []gateCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			if tc.mod != nil {
				tc.mod(&in)
			}
			r := check(in)
			seenCodes[tc.code] = true
			if r.Gate != gate || r.Verdict != tc.verdict || r.ReasonCode != tc.code {
				t.Fatalf("got %s %s %s (%s), want %s %s %s", r.Gate, r.Verdict, r.ReasonCode, r.Reason, gate, tc.verdict, tc.code)
			}
			if r.Reason == "" || strings.ToUpper(r.Reason[:1]) != r.Reason[:1] {
				t.Errorf("reason %q is not a sentence", r.Reason)
			}
			for _, s := range tc.contains {
				if !strings.Contains(r.Reason, s) {
					t.Errorf("reason %q does not contain %q", r.Reason, s)
				}
			}
		})
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && !strings.Contains(strings.Join(os.Args, " "), "-test.run") {
		var missing []string
		for _, c := range reasonConstants() {
			if !seenCodes[c] {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			println("reason codes without a named test case:", strings.Join(missing, ", "))
			code = 1
		}
	}
	os.Exit(code)
}

// reasonConstants reads the value of every Reason* constant in the
// package's source.
func reasonConstants() []string {
	files, err := filepath.Glob("*.go")
	if err != nil {
		panic(err)
	}
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			panic(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if v, ok := n.(*ast.ValueSpec); ok && strings.HasPrefix(v.Names[0].Name, "Reason") && len(v.Values) == 1 {
				if lit, ok := v.Values[0].(*ast.BasicLit); ok {
					out = append(out, strings.Trim(lit.Value, `"`))
				}
			}
			return true
		})
	}
	return out
}
