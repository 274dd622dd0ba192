package gate

import (
	"testing"
	"time"
)

func TestApproval(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(in *Input)
		ok   bool
		code string
	}{
		{"none", func(in *Input) {}, false, ReasonApprovalRequired},
		{"this request", approve, true, ReasonApproved},
		{"another request", func(in *Input) { approve(in); in.ApprovedFingerprint = "fp_other" }, false, ReasonApprovalMismatch},
		{"empty fingerprints never match", func(in *Input) { approve(in); in.Fingerprint = ""; in.ApprovedFingerprint = "" }, false, ReasonApprovalRequired},
		{"request without fingerprint", func(in *Input) { approve(in); in.Fingerprint = "" }, false, ReasonApprovalMismatch},
		{"expires this instant", func(in *Input) { approve(in); in.ApprovalExpiresAt = in.Now }, false, ReasonApprovalExpired},
		{"no expiry is expired", func(in *Input) { approve(in); in.ApprovalExpiresAt = time.Time{} }, false, ReasonApprovalExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := payoutIn()
			tc.mod(&in)
			ok, code, reason := approval(in)
			if ok != tc.ok || code != tc.code || reason == "" {
				t.Fatalf("approval = %v %s %q, want %v %s", ok, code, reason, tc.ok, tc.code)
			}
		})
	}
}
