package gate

import (
	"fmt"
	"strings"
)

// approval reports whether the owner approved this exact request: an
// approval whose fingerprint equals the request's and that has not expired.
// Either way code and reason describe the approval for the result.
func approval(in Input) (ok bool, code, reason string) {
	switch {
	case in.ApprovedFingerprint == "":
		return false, ReasonApprovalRequired, "the owner must approve this exact request; send the identical request again after approval"
	case in.Fingerprint == "" || in.ApprovedFingerprint != in.Fingerprint:
		return false, ReasonApprovalMismatch, fmt.Sprintf("the owner approved request %s, not this one (%s); a changed request needs its own approval, so send the approved request unchanged or wait for approval of this one",
			short(in.ApprovedFingerprint), orNone(short(in.Fingerprint)))
	case labelsOf(in.ApprovedLabels) != labelsOf(in.Labels):
		return false, ReasonApprovalLabelsChanged, fmt.Sprintf("the owner approved request %s with other labels (%s changed); an approval covers the exact request, free text included, so this changed request is held for the owner's own approval of it, and the earlier approval no longer applies",
			short(in.Fingerprint), strings.Join(inertAll(changedLabels(in.ApprovedLabels, in.Labels)), ", "))
	case !in.Now.Before(in.ApprovalExpiresAt):
		return false, ReasonApprovalExpired, fmt.Sprintf("the owner's approval of request %s expired at %s, before this request came back; it needs a new approval, so send the identical request again once the owner approves it again",
			short(in.Fingerprint), stamp(in.ApprovalExpiresAt))
	}
	return true, ReasonApproved, fmt.Sprintf("the owner approved request %s (usable until %s)", short(in.Fingerprint), stamp(in.ApprovalExpiresAt))
}

func orNone(s string) string {
	if s == "" {
		return "no fingerprint"
	}
	return s
}
