package razorpay

import (
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

// TestCheckJSONRules: checkJSON takes one object, at most maxDepth deep,
// and compares names exactly (spec.read refuses a name in another case);
// a refusal wraps rail.ErrMalformed and names the member's path, or body.
func TestCheckJSONRules(t *testing.T) {
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	for _, tc := range []struct {
		name, body    string
		field, detail string // both "" for accepted
	}{
		{name: "names in two cases", body: `{"amount":1,"AMOUNT":2}`},
		{name: "32 deep", body: deep(32)},
		{name: "33 deep", body: deep(33), field: "body", detail: "nested deeper than 32"},
		{name: "an array", body: `[{"amount":1}]`, field: "body", detail: "must be a JSON object"},
		{name: "after the object", body: `{"amount":1} {}`, field: "body", detail: "data after the JSON object"},
		{name: "twice in notes", body: `{"notes":{"k":"a","k":"b"}}`, field: "notes.k", detail: "sent twice in one object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkJSON([]byte(tc.body))
			switch {
			case tc.field == "" && got != nil:
				t.Errorf("checkJSON(%.60q) = %v, want it accepted", tc.body, got)
			case tc.field == "":
			case !errors.Is(got, rail.ErrMalformed):
				t.Errorf("checkJSON(%.60q) = %v, want rail.ErrMalformed", tc.body, got)
			case got.Error() != malformed(tc.field, "%s", tc.detail).Error():
				t.Errorf("checkJSON(%.60q) = %v, want field %q: %q", tc.body, got, tc.field, tc.detail)
			}
		})
	}
}
