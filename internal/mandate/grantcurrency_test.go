package mandate

import (
	"errors"
	"strings"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// TestGrantInManyCurrenciesNeedsAnAmountLimit: a refund grant of KRW and
// USD up to 500000 (₩500,000, about 360 USD) under a mandate with no budget
// and no amount window would let the agent refund 5,000.00 USD; it is
// refused, from YAML with its line and through Validate (the API's path).
// Any budget or amount window makes it acceptable: the gates then refuse a
// currency that has none of its own.
func TestGrantInManyCurrenciesNeedsAnAmountLimit(t *testing.T) {
	const base = `rail: stripe
rail_account: acct_1Nv0FGQ9RKHgCVdK
agent_id: agt_k3v9q2m1x7c4b8n6z5wd
purpose: Refunds of Korean and American orders
valid_from: 2026-01-01T00:00:00Z
valid_until: 2026-04-01T00:00:00Z
mode: budgeted
grants:
  - action_kind: refund
    max_amount_minor: 500000
    currencies: [KRW, USD]
`
	for _, tc := range []struct {
		name  string
		yaml  string
		wants bool // the problem is reported
	}{
		{"no budget, no window", base, true},
		{"calls-only window", base + "windows:\n  - {scope: payee, duration: 24h, max_calls: 3}\n", true},
		{"one currency", strings.Replace(base, "[KRW, USD]", "[KRW]", 1), false},
		{"budget", base + "budgets:\n  - {amount_minor: 5000000, currency: KRW}\n", false},
		{"amount window", base + "windows:\n  - {scope: agent, duration: 24h, max_amount: {amount_minor: 50000, currency: USD}}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var found *Problem
			problems := Lint([]byte(tc.yaml))
			for i, p := range problems {
				if p.Rule == "grant.currency_ambiguous" {
					found = &problems[i]
				} else {
					t.Errorf("another problem: %+v", p)
				}
			}
			if !tc.wants {
				if found != nil {
					t.Fatalf("refused: %+v", *found)
				}
				return
			}
			if found == nil {
				t.Fatalf("accepted a grant of KRW and USD up to 500000 with no amount limit:\n%s", tc.yaml)
			}
			if found.Field != "grants[0].currencies" || found.Line != 11 {
				t.Errorf("problem at %s line %d, want grants[0].currencies line 11", found.Field, found.Line)
			}
			for _, w := range []string{"500000 is 500,000 KRW or 5,000.00 USD", "minor units of one currency", "add a budget in each of KRW, USD"} {
				if !strings.Contains(found.Message, w) {
					t.Errorf("message %q lacks %q", found.Message, w)
				}
			}
		})
	}

	t.Run("Validate", func(t *testing.T) {
		m, err := Parse([]byte(strings.Replace(base, "[KRW, USD]", "[KRW]", 1)))
		if err != nil {
			t.Fatal(err)
		}
		m.Grants[0].Currencies = []string{"KRW", "USD"}
		var e *Error
		if err := Validate(m); !errors.As(err, &e) || len(e.Problems) != 1 || e.Problems[0].Rule != "grant.currency_ambiguous" {
			t.Fatalf("Validate = %v, want one grant.currency_ambiguous problem", err)
		}
		m.Budgets = []*countersignv1.Money{{AmountMinor: 100000, Currency: "USD"}}
		if err := Validate(m); err != nil {
			t.Fatalf("Validate with a budget = %v", err)
		}
	})
}
