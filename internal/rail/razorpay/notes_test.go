package razorpay

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// TestParseRefusesNotesKeysEqualUpToCase: Razorpay keeps notes keys that
// differ only in case apart and echoes them in the created entity, where
// the strict answer reader counts them as one member twice: an agent
// sending such keys would make its own applied answers ambiguous, each
// settled by a listing on the owner's rate limit. Parse refuses them,
// naming the key; what it accepts, echoed with the stamp, reads Applied.
func TestParseRefusesNotesKeysEqualUpToCase(t *testing.T) {
	for _, tc := range []struct {
		name    string
		notes   string
		refused string // the key the error names, "" when accepted
	}{
		{"distinct keys", `{"ticket":"a","order":"b"}`, ""},
		{"the stamp key exactly", `{"ticket":"a","countersign_sik":"x"}`, ""},
		{"case pair", `{"ticket":"a","TICKET":"b"}`, "ticket"},
		{"stamp key in upper case", `{"COUNTERSIGN_SIK":"x"}`, "COUNTERSIGN_SIK"},
		{"stamp key beside its variant", `{"countersign_sik":"x","Countersign_SIK":"y"}`, "Countersign_SIK"},
		{"kelvin sign", `{"k":"a","\u212a":"b"}`, "k"},
		{"long s", `{"s":"a","\u017f":"b"}`, "\u017f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New().Parse(post("/v1/payments/pay_1/refund", `{"amount":100,"notes":`+tc.notes+`}`))
			if tc.refused != "" {
				if !errors.Is(err, rail.ErrMalformed) || !strings.Contains(err.Error(), "notes") || !strings.Contains(err.Error(), "\""+tc.refused+"\"") {
					t.Fatalf("Parse = %v; want a malformed notes error naming %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			// The refund Razorpay creates echoes every note, and the stamp.
			notes := map[string]string{sik.StampKey: stampA}
			for name, l := range p.Action.Labels {
				if k, ok := strings.CutPrefix(name, "notes."); ok {
					notes[k] = l.Value
				}
			}
			notesJSON, _ := json.Marshal(notes)
			body := `{"id":"rfnd_1","entity":"refund","amount":100,"currency":"INR","payment_id":"pay_1","status":"processed","created_at":1,"notes":` + string(notesJSON) + `}`
			c := New().Classify(p.Action, rail.Response{Status: http.StatusOK, Body: []byte(body)})
			if c.Outcome != rail.Applied {
				t.Fatalf("the echoed refund %s reads %v (%s), want applied", body, c.Outcome, c.Reason)
			}
		})
	}
}
