package gate

import (
	"fmt"
	"slices"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/sik"
)

// RailMCP names a payment MCP server as Input.Rail; sik names the others.
const RailMCP sik.Rail = "mcp"

var actionKinds = map[sik.Kind]countersignv1.ActionKind{
	sik.KindRefund:   countersignv1.ActionKind_ACTION_KIND_REFUND,
	sik.KindPayout:   countersignv1.ActionKind_ACTION_KIND_PAYOUT,
	sik.KindTransfer: countersignv1.ActionKind_ACTION_KIND_TRANSFER,
}

var railKinds = map[sik.Rail]countersignv1.Rail{
	sik.RailStripe:   countersignv1.Rail_RAIL_STRIPE,
	sik.RailRazorpay: countersignv1.Rail_RAIL_RAZORPAY,
	RailMCP:          countersignv1.Rail_RAIL_MCP,
}

// grantFor is m's grant for kind, nil when m grants no such action (or m is
// nil, or kind is not a kind the mandate can name).
func grantFor(m *countersignv1.Mandate, kind sik.Kind) *countersignv1.Grant {
	k, ok := actionKinds[kind]
	if !ok {
		return nil
	}
	for _, g := range m.GetGrants() {
		if g.GetActionKind() == k {
			return g
		}
	}
	return nil
}

// budgetFor is m's total budget in currency, nil when it sets none.
func budgetFor(m *countersignv1.Mandate, currency string) *countersignv1.Money {
	i := slices.IndexFunc(m.GetBudgets(), func(b *countersignv1.Money) bool { return b.GetCurrency() == currency })
	if i < 0 {
		return nil
	}
	return m.GetBudgets()[i]
}

// validity returns m's validity window, or a problem when m lacks what the
// gates rely on. The mandate package validates mandates when they are
// created; this re-checks only what would otherwise fail open or mislead.
func validity(m *countersignv1.Mandate) (from, until time.Time, problem string) {
	vf, vu := m.GetValidFrom(), m.GetValidUntil()
	switch {
	case vf == nil || vf.CheckValid() != nil:
		return from, until, "has no valid valid_from"
	case vu == nil || vu.CheckValid() != nil:
		return from, until, "has no valid valid_until"
	case !vu.AsTime().After(vf.AsTime()):
		return from, until, "ends (valid_until) before it starts (valid_from)"
	}
	switch m.GetMode() {
	case countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED, countersignv1.MandateMode_MANDATE_MODE_BUDGETED:
	default:
		return from, until, fmt.Sprintf("has mode %s, which is neither approval_required nor budgeted", m.GetMode())
	}
	return vf.AsTime(), vu.AsTime(), ""
}

// mandateName names the mandate in reasons by a prefix of its hash.
func mandateName(in Input) string {
	if in.MandateHash == "" {
		return "the mandate"
	}
	return "mandate " + short(in.MandateHash)
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
