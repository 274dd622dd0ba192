package engine

import (
	"fmt"
	"net/http"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// ReasonSourceAccountNotAllowed refuses a payout from an account the rails
// file does not list for the rail account (payout_account_numbers).
const ReasonSourceAccountNotAllowed = "source_account_not_allowed"

// sourceAccountRefusal refuses, before any rail read, a payout whose source
// account (a RazorpayX payout's account_number) is not one acct's rails
// file entry allows; nil when it is, or when the entry lists none. The
// agent chooses every byte of account_number: unchecked, it picks which of
// the business's accounts pays, and the reconciler looks for the payout
// only in the account it named. The refusal names how many accounts are
// allowed but neither them nor the value sent, which the agent composed
// and the decision record would keep.
func sourceAccountRefusal(req Request, acct *rails.Account, a rail.Action) *Outcome {
	if a.Kind != sik.KindPayout || acct.Rail != sik.RailRazorpay {
		return nil
	}
	// A payout without one, when a list is set, is refused too: fail closed.
	return unlistedSource(req, acct, a.Extra["account_number"],
		"Countersign refuses this payout: payouts on %s may leave only from the %d RazorpayX %s the operator listed, and its account_number is not %s; send it from a listed account.")
}

// unlistedSource refuses, with the sentence format (the account, how many
// are listed, "account(s)", "that one"/"one of them"), a request naming a
// source account number acct's entry does not list; nil when it is listed
// or the entry lists none.
func unlistedSource(req Request, acct *rails.Account, number, format string) *Outcome {
	allowed, listed := acct.PayoutSource(number)
	if allowed {
		return nil
	}
	out := refuseRail(acct, req, ReasonSourceAccountNotAllowed, fmt.Sprintf(format,
		acct.ID, listed, plural(listed, "account", "accounts"), plural(listed, "that one", "one of them")), http.StatusForbidden)
	return &out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// readSourceRefusal refuses a read listing the entities of a business
// account (a RazorpayX payout list's account_number) that acct's rails
// file entry does not list for its payouts; nil when it is listed, when
// the entry lists none, or when the read names no account. The agent may
// not see the payouts of an account it may not pay from (found by a
// review).
func readSourceRefusal(req Request, acct *rails.Account, source string) *Outcome {
	if source == "" {
		return nil
	}
	return unlistedSource(req, acct, source,
		"Countersign refuses this read: on %s the agent may list the payouts only of the %d RazorpayX %s the operator listed, and its account_number is not %s.")
}
