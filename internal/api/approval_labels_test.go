package api

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"testing"

	"github.com/countersign/countersign/internal/ledger"
)

// The owner reviews the labels an approval covers, and their digest.
func TestApprovalShowsItsLabels(t *testing.T) {
	const canon = `{"metadata[ticket]":"T-77 <b>x</b>","reason":"duplicate"}`
	sum := sha256.Sum256([]byte(canon))
	a := toApproval(ledger.Approval{ID: "apr_1", State: "pending", Labels: canon})
	if want := map[string]string{"metadata[ticket]": "T-77 <b>x</b>", "reason": "duplicate"}; !maps.Equal(a.GetLabels(), want) {
		t.Errorf("labels = %v, want %v", a.GetLabels(), want)
	}
	if a.GetLabelsDigest() != hex.EncodeToString(sum[:]) {
		t.Errorf("labels_digest = %s, want the SHA-256 of %s", a.GetLabelsDigest(), canon)
	}
	none := sha256.Sum256([]byte("{}"))
	for _, labels := range []string{"", "{}"} {
		if a := toApproval(ledger.Approval{ID: "apr_2", State: "pending", Labels: labels}); len(a.GetLabels()) != 0 || a.GetLabelsDigest() != hex.EncodeToString(none[:]) {
			t.Errorf("labels %q: %v %s, want none and the digest of {}", labels, a.GetLabels(), a.GetLabelsDigest())
		}
	}
}
