package stripe

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// TestParseRefusesMetadataKeysEqualUpToCase: Stripe keeps metadata keys
// that differ only in case apart and echoes them in the created entity,
// where the strict answer reader counts them as one member twice: an
// agent sending such keys would make its own applied answers ambiguous,
// each settled by a listing on the owner's rate limit. Parse refuses them,
// naming the key; what it accepts, echoed with the stamp, reads Applied.
func TestParseRefusesMetadataKeysEqualUpToCase(t *testing.T) {
	for _, tc := range []struct {
		name    string
		form    string
		refused string // the key the error names, "" when accepted
	}{
		{"distinct keys", "metadata[ticket]=a&metadata[order]=b", ""},
		{"the stamp key exactly", "metadata[ticket]=a&metadata[countersign_sik]=x", ""},
		{"case pair", "metadata[ticket]=a&metadata[TICKET]=b", "TICKET"},
		{"case pair, upper first", "metadata[TICKET]=a&metadata[ticket]=b", "ticket"},
		{"stamp key in upper case", "metadata[COUNTERSIGN_SIK]=x", "COUNTERSIGN_SIK"},
		{"stamp key beside its variant", "metadata[countersign_sik]=x&metadata[Countersign_SIK]=y", "Countersign_SIK"},
		{"kelvin sign", "metadata[k]=a&metadata[%E2%84%AA]=b", "\u212a"},
		{"long s", "metadata[s]=a&metadata[%C5%BF]=b", "\u017f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New().Parse(post("/v1/refunds", "payment_intent=pi_1&amount=1500&"+tc.form))
			if tc.refused != "" {
				if !errors.Is(err, rail.ErrMalformed) || !strings.Contains(err.Error(), "metadata") || !strings.Contains(err.Error(), "\""+tc.refused+"\"") {
					t.Fatalf("Parse = %v; want a malformed metadata error naming %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			// The refund Stripe creates echoes every key, and the stamp.
			md := map[string]string{sik.StampKey: stampA}
			for name, l := range p.Action.Labels {
				if k, ok := metadataKey(name); ok {
					md[k] = l.Value
				}
			}
			mdJSON, _ := json.Marshal(md)
			body := `{"id":"re_1","object":"refund","amount":1500,"currency":"usd","status":"succeeded","created":1,"payment_intent":"pi_1","charge":"ch_1","metadata":` + string(mdJSON) + `}`
			c := New().Classify(p.Action, rail.Response{Status: http.StatusOK, Body: []byte(body)})
			if c.Outcome != rail.Applied {
				t.Fatalf("the echoed refund %s reads %v (%s), want applied", body, c.Outcome, c.Reason)
			}
		})
	}
}
