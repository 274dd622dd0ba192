package gate

import (
	"fmt"

	"github.com/countersign/countersign/internal/sik"
)

// NewPayee is the shipped advisory gate: the first payout or transfer to a
// payee this rail account has never paid is HELD for the owner. Refunds go
// back to the original payer and pass.
type NewPayee struct{}

// Name implements Advisor.
func (NewPayee) Name() string { return "new_payee" }

// Advise implements Advisor.
func (NewPayee) Advise(in Input) *Objection {
	a := in.Action
	if a.Kind == sik.KindRefund || in.PayeeSeenBefore {
		return nil
	}
	return HoldFor(ReasonNewPayee, fmt.Sprintf("%s has never been paid from %s; the owner must approve this first payment of %s, so send the identical request again after approval",
		orNone(inert(a.Payee)), in.RailAccount, amount(in, a.AmountMinor, a.Currency)))
}
