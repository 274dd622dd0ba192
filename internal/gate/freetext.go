package gate

import (
	"strings"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// checkFreeText is G1's rule for the mandate's free_text policy: what text
// may leave in the request's label members (metadata, notes, description,
// …), which move no money and so are in no limit, and in a keyed member
// that takes text (a Razorpay purpose made in the Dashboard, an MCP Extra
// with no list of values), which the adapter reports as a free-text label
// too. refuse blocks a request
// carrying any; hold holds it until the owner, who sees the text with the
// approval, approves that exact request (labels included). allow, the
// default, lets it pass. ok is false when the rule decided (r says how).
func checkFreeText(in Input) (r Result, ok bool) {
	if len(in.FreeText) == 0 {
		return Result{}, true
	}
	// A member's name is the agent's text (a metadata key): inert, as the
	// reason leaves in the signed intent.held webhook.
	members := strings.Join(inertAll(in.FreeText), ", ")
	switch in.Mandate.GetFreeText() {
	case countersignv1.FreeText_FREE_TEXT_REFUSE:
		return block(GateScope, ReasonFreeTextRefused, "%s refuses free text in a request, and this one carries it in %s; send the request without %s.",
			mandateName(in), members, plural(in.FreeText, "that member", "those members")), false
	case countersignv1.FreeText_FREE_TEXT_HOLD:
		if approved, _, why := approval(in); !approved {
			return hold(GateScope, ReasonFreeTextHeld, "%s holds free text for the owner, and this request carries it in %s: %s.", mandateName(in), members, why), false
		}
	}
	return Result{}, true
}

func plural(items []string, one, many string) string {
	if len(items) == 1 {
		return one
	}
	return many
}
