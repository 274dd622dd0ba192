package mandate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/money"
)

// Answers are what `countersign mandate init` asks an owner.
type Answers struct {
	Rail        countersignv1.Rail
	RailAccount string
	AgentID     string
	Purpose     string
	// Actions the agent may take.
	Actions []countersignv1.ActionKind
	// Currency is the one currency of the grants and limits (ISO 4217).
	Currency string
	// MaxPerAction is the most one action may move, in minor units.
	MaxPerAction int64
	// DailyCap is the most all actions together may move in any 24 hours.
	DailyCap int64
	// Payees the agent may pay; needed when it may pay out or transfer.
	Payees []string
	// Mode is approval_required (every request waits for the approver) or
	// budgeted (pre-approved within the limits; exceptions wait).
	Mode countersignv1.MandateMode
	// Approver is who approves held requests. The mandate has no field for
	// it (approvals go to the owner's approvers), so it is written as a comment.
	Approver   string
	ValidFrom  time.Time
	ValidUntil time.Time
}

// Template writes answers as a commented mandate for a person to review
// before `countersign mandate apply`. The result always passes [Lint]; an
// answer that would make it fail is an error.
func Template(a Answers) ([]byte, error) {
	if len(a.Actions) == 0 {
		return nil, errors.New("mandate: template: no action granted")
	}
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	cur := a.Currency
	line("# Countersign mandate, drafted by `countersign mandate init` on %s.", time.Now().UTC().Format("2006-01-02"))
	line("# Review every line, then check and store it:")
	line("#   countersign mandate lint FILE && countersign mandate apply FILE")
	line("# A stored mandate never changes: editing this file and applying it again creates a")
	line("# new mandate (a new hash); revoke the old one with `countersign mandate revoke HASH`.")
	// Read as the rail reads minor units: on Stripe 1250 MGA is 1,250 MGA.
	line("# Amounts are integers in minor units of the currency, as %s counts them (1250 means %s).",
		railName(a.Rail), money.ForRail(railName(a.Rail)).Format(1250, cur))
	line("")
	line("rail: %s", railName(a.Rail))
	line("# The rail account the agent acts on, and the agent this mandate authorizes.")
	line("rail_account: %s", quote(a.RailAccount))
	line("agent_id: %s", quote(a.AgentID))
	line("# Shown to whoever approves a held request.")
	line("purpose: %s", quote(a.Purpose))
	line("valid_from: %s", a.ValidFrom.UTC().Format(time.RFC3339))
	line("valid_until: %s", a.ValidUntil.UTC().Format(time.RFC3339))
	line("")
	approver := oneLine(a.Approver)
	switch a.Mode {
	case countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED:
		line("# approval_required: every money-moving request waits until it is approved.")
		line("# budgeted would pre-approve requests within the limits below.")
	case countersignv1.MandateMode_MANDATE_MODE_BUDGETED:
		line("# budgeted: requests within the limits below go through without asking;")
		line("# anything held (an advisory gate, an exception) waits for approval.")
		line("# approval_required would hold every money-moving request.")
	}
	if approver != "" {
		line("# Approver: %s (approvals go to the owner's approvers; the mandate does not name one).", approver)
	}
	line("mode: %s", EnumName(a.Mode.Descriptor(), a.Mode.Number()))
	line("")
	line("# What the agent may do, each up to %s per action.", minor(a.MaxPerAction, cur))
	line("grants:")
	payees := false
	for _, k := range a.Actions {
		line("  - action_kind: %s", actionName(k))
		line("    max_amount_minor: %d", a.MaxPerAction)
		line("    currencies: [%s]", cur)
		if k == countersignv1.ActionKind_ACTION_KIND_PAYOUT || k == countersignv1.ActionKind_ACTION_KIND_TRANSFER {
			payees = true
		}
	}
	line("")
	if payees {
		line("# Destinations the agent may pay out or transfer to; anything else is blocked.")
		line("# (Refunds go back to the original payer and are not checked against this list.)")
		if len(a.Payees) == 0 {
			line("allowed_payees: []")
		} else {
			line("allowed_payees:")
		}
		for _, p := range a.Payees {
			line("  - %s", quote(p))
		}
	} else {
		line("# allowed_payees: [] # only payouts and transfers are checked against it")
	}
	line("")
	line("# Daily cap: all actions together move at most %s in any 24 hours.", minor(a.DailyCap, cur))
	line("windows:")
	line("  - scope: agent")
	line("    duration: 24h")
	line("    max_amount: {amount_minor: %d, currency: %s}", a.DailyCap, cur)
	line("  # A per-payee cap, e.g. at most 3 actions per payee (or per payment, for refunds) a day:")
	line("  # - scope: payee")
	line("  #   duration: 24h")
	line("  #   max_calls: 3")
	line("")
	line("# Optional: a total budget over the mandate's whole life, held two-phase.")
	line("# budgets:")
	line("#   - {amount_minor: %d, currency: %s}", a.DailyCap*30, cur)
	line("")
	line("# Idempotency: refunds never take a time window (two identical refunds of one")
	line("# payment are the same action however far apart). Payouts and transfers may fold")
	line("# a window into their key, e.g. identical payouts within a day are one payout:")
	line("# idempotency:")
	line("#   - action_kind: payout")
	line("#     window: 24h")
	out := []byte(b.String())
	if problems := Lint(out); len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return out, nil
}

func quote(s string) string { return strconv.Quote(s) }

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// minor writes an amount for a comment: "5000 USD minor units".
func minor(v int64, currency string) string {
	return fmt.Sprintf("%d %s minor units", v, currency)
}
