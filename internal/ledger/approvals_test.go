package ledger

import (
	"strings"
	"testing"
	"time"
)

// An approval that can no longer be decided says why: expired (before or
// after the owner approved it), already used, rejected, voided, or already
// approved.
func TestNotDecidable(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	expires := now.Add(time.Hour)
	approvedAt := now.Add(-time.Hour)
	expiredAt := expires.Add(time.Minute)
	for _, tc := range []struct {
		name    string
		state   string
		expires time.Time
		decided *time.Time
		want    string // "" when it can be decided
	}{
		{"pending", "pending", expires, nil, ""},
		{"pending past its expiry", "pending", now, nil, "approval apr_1 expired at 2026-03-01T12:00:00Z before it was decided"},
		{"already approved", "approved", expires, &approvedAt, "approval apr_1 was already approved at 2026-03-01T11:00:00Z; the identical request may use it once, until 2026-03-01T13:00:00Z"},
		{"used", "used", expires, &approvedAt, "approval apr_1 was approved at 2026-03-01T11:00:00Z and already used by the request it covers; an approval is used once"},
		{"rejected", "rejected", expires, &approvedAt, "approval apr_1 was rejected at 2026-03-01T11:00:00Z; its request is blocked for good"},
		{"expired undecided", "expired", expires, &expiredAt, "approval apr_1 expired at 2026-03-01T13:00:00Z before it was decided"},
		{"expired after approval", "expired", expires, &approvedAt, "approval apr_1 was approved at 2026-03-01T11:00:00Z but expired at 2026-03-01T13:00:00Z before its request used it"},
		{"void", "void", expires, &approvedAt, "approval apr_1 was voided: its agent or mandate was revoked, or its request was blocked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := notDecidable(Approval{ID: "apr_1", State: tc.state, ExpiresAt: tc.expires, DecidedAt: tc.decided}, now)
			if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
				t.Fatalf("notDecidable = %q, want it to start with %q", got, tc.want)
			}
		})
	}
}
