package gate

import (
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
)

const (
	ticketLabels = `{"metadata[ticket]":"T-77"}`
	cardLabels   = `{"metadata[ticket]":"T-77 4242-4242-4242-4242"}`
)

// withText makes the request carry free text in metadata[ticket].
func withText(in *Input) { in.Labels, in.FreeText = ticketLabels, []string{"metadata[ticket]"} }

func freeText(mode countersignv1.FreeText) func(in *Input) {
	return func(in *Input) { in.Mandate.FreeText = mode; withText(in) }
}

// approveLabels approves this request with the given labels.
func approveLabels(labels string) func(in *Input) {
	return func(in *Input) { approve(in); in.ApprovedLabels = labels }
}

func all(mods ...func(in *Input)) func(in *Input) {
	return func(in *Input) {
		for _, m := range mods {
			m(in)
		}
	}
}

// G1 applies the mandate's free_text: allow (the default) passes, refuse
// blocks naming the member, hold waits for the owner's approval of the
// exact request, labels included.
func TestCheckFreeText(t *testing.T) {
	refuse, hold := freeText(countersignv1.FreeText_FREE_TEXT_REFUSE), freeText(countersignv1.FreeText_FREE_TEXT_HOLD)
	runGate(t, refundIn, CheckScope, GateScope, []gateCase{
		{name: "default allows free text", mod: withText, verdict: Allow, code: ReasonPassed},
		{name: "allow allows free text", mod: freeText(countersignv1.FreeText_FREE_TEXT_ALLOW), verdict: Allow, code: ReasonPassed},
		{name: "refuse without free text passes", mod: func(in *Input) {
			in.Mandate.FreeText = countersignv1.FreeText_FREE_TEXT_REFUSE
			in.Labels = `{"reason":"duplicate"}` // a closed label is not free text
		}, verdict: Allow, code: ReasonPassed},
		{name: "refuse blocks and names the member", mod: refuse, verdict: Block, code: ReasonFreeTextRefused,
			contains: []string{"metadata[ticket]", "without that member"}},
		{name: "refuse names every member", mod: func(in *Input) {
			refuse(in)
			in.FreeText = []string{"description", "metadata[ticket]"}
		}, verdict: Block, code: ReasonFreeTextRefused, contains: []string{"description, metadata[ticket]", "those members"}},
		{name: "refuse is not lifted by an approval", mod: all(refuse, approveLabels(ticketLabels)), verdict: Block, code: ReasonFreeTextRefused},
		{name: "hold holds free text for the owner", mod: hold, verdict: Hold, code: ReasonFreeTextHeld,
			contains: []string{"metadata[ticket]", "the owner must approve"}},
		{name: "hold lifted by the approval of these labels", mod: all(hold, approveLabels(ticketLabels)), verdict: Allow, code: ReasonPassed},
		{name: "hold not lifted by the approval of other labels", mod: all(hold, approveLabels(`{"metadata[ticket]":"T-76"}`)), verdict: Hold, code: ReasonFreeTextHeld,
			contains: []string{"metadata[ticket] changed"}},
		{name: "hold then propose-only, both lifted", mod: all(hold, approveLabels(ticketLabels), func(in *Input) { in.Credential.Scope = credential.ScopePropose }),
			verdict: Allow, code: ReasonApproved},
	})
}

// An approval covers the exact request: the same action with other labels
// is held again, whatever gate waits for the owner.
func TestApprovalCoversLabels(t *testing.T) {
	approvalRequired := func(in *Input) { in.Mandate.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED }
	runGate(t, refundIn, CheckLimits, GateLimits, []gateCase{
		{name: "approved with these labels", mod: all(approvalRequired, withText, approveLabels(ticketLabels)), verdict: Allow, code: ReasonApproved},
		{name: "approved with no labels, none sent", mod: all(approvalRequired, approve), verdict: Allow, code: ReasonApproved},
		{name: "approved before labels were recorded", mod: all(approvalRequired, approveLabels(""), func(in *Input) { in.Labels = "{}" }), verdict: Allow, code: ReasonApproved},
		{name: "approved with labels, sent with other text", mod: all(approvalRequired, approveLabels(ticketLabels), func(in *Input) { in.Labels = cardLabels }),
			verdict: Hold, code: ReasonApprovalLabelsChanged, contains: []string{"metadata[ticket] changed", "held for the owner's own approval"}},
		{name: "approved with labels, sent without", mod: all(approvalRequired, approveLabels(ticketLabels)),
			verdict: Hold, code: ReasonApprovalLabelsChanged, contains: []string{"metadata[ticket] changed"}},
		{name: "approved without labels, sent with some", mod: all(approvalRequired, approve, withText),
			verdict: Hold, code: ReasonApprovalLabelsChanged, contains: []string{"metadata[ticket] changed"}},
	})
}

func TestChangedLabelsNamesNoValues(t *testing.T) {
	got := changedLabels(`{"a":"1","b":"2","c":"3"}`, `{"a":"1","b":"SECRET","d":"4"}`)
	if want := "[b c d]"; fmtSlice(got) != want {
		t.Errorf("changedLabels = %v, want %s", got, want)
	}
}

func fmtSlice(s []string) string {
	out := "["
	for i, v := range s {
		if i > 0 {
			out += " "
		}
		out += v
	}
	return out + "]"
}
