package rails

import (
	"errors"
	"fmt"

	"github.com/countersign/countersign/internal/sik"
)

// A RazorpayX payout names the account it leaves from in account_number:
// the business's current account number, or its RazorpayX Lite customer
// identifier (Razorpay's create-payout docs; e.g. 7878780080316316). Both
// are digits; an Indian bank account number is 9 to 18 of them, and a
// customer identifier is 16. The bounds refuse a typo (a fund account id,
// the contact's account, a truncated paste) at load, not at the first
// payout.
const (
	minPayoutAccountLen = 9
	maxPayoutAccountLen = 18
)

// payoutAccounts checks c's payout_account_numbers and returns them as a
// set (nil when unset: the agent chooses).
func payoutAccounts(c AccountConfig) (map[string]bool, error) {
	if c.PayoutAccountNumbers == nil {
		return nil, nil
	}
	switch {
	case sik.Rail(c.Rail) != sik.RailRazorpay:
		return nil, fmt.Errorf("payout_account_numbers is for razorpay accounts (a RazorpayX payout's account_number); a %s payout names no source account to check", c.Rail)
	case c.MCP != nil:
		return nil, fmt.Errorf("payout_account_numbers: this account's hosts are a payment MCP server (mcp.preset %q), which has no payout-creating tool; "+
			"set it on the razorpay account that guards the REST API (api.razorpay.com)", c.MCP.Preset)
	case len(c.PayoutAccountNumbers) == 0:
		return nil, errors.New("payout_account_numbers is empty: list the RazorpayX account numbers payouts may leave from, or leave it out to let the agent choose")
	}
	set := make(map[string]bool, len(c.PayoutAccountNumbers))
	for i, n := range c.PayoutAccountNumbers {
		if !isPayoutAccount(n) {
			return nil, fmt.Errorf("payout_account_numbers[%d] %.40q is not a RazorpayX account number: %d to %d digits (the current account number, or the RazorpayX Lite customer identifier, from the RazorpayX Dashboard, quoted: YAML reads an unquoted 0123… as another number)",
				i, n, minPayoutAccountLen, maxPayoutAccountLen)
		}
		if set[n] {
			return nil, fmt.Errorf("payout_account_numbers[%d] %q is listed twice", i, n)
		}
		set[n] = true
	}
	return set, nil
}

func isPayoutAccount(n string) bool {
	if len(n) < minPayoutAccountLen || len(n) > maxPayoutAccountLen {
		return false
	}
	for i := 0; i < len(n); i++ {
		if n[i] < '0' || n[i] > '9' {
			return false
		}
	}
	return true
}

// PayoutSource reports whether a payout on a may leave from the account
// number, and how many source accounts a allows (0: no list, any may).
func (a *Account) PayoutSource(number string) (allowed bool, listed int) {
	if a.payoutAccounts == nil {
		return true, 0
	}
	return a.payoutAccounts[number], len(a.payoutAccounts)
}

// Warnings are what `countersign serve` should log at start about the
// registry's configuration: today, each REST razorpay account on which the
// agent chooses the account its payouts leave from.
func (r *Registry) Warnings() []string {
	var out []string
	for _, a := range r.Accounts() {
		if a.Rail == sik.RailRazorpay && a.ToolClient == nil && a.payoutAccounts == nil {
			out = append(out, fmt.Sprintf("rail account %s: razorpay without payout_account_numbers: the agent chooses which of the business's RazorpayX accounts "+
				"a payout leaves from (account_number), and the reconciler looks for a payout only in the account it named; list the allowed ones in the rails file", a.ID))
		}
	}
	return out
}
