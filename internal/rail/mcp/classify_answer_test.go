package mcp

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

// TestClassifyEncodedAnswerIsAmbiguous: an answer in a content coding is
// bytes Countersign cannot read; not a refusal it can vouch for (whatever
// the status), nor a result.
func TestClassifyEncodedAnswerIsAmbiguous(t *testing.T) {
	ok := result(toolkitRefund("re_1", 1500), false)
	for _, status := range []int{200, 400, 401, 404, 429} {
		for coding, encoded := range map[string]bool{"": false, "identity": false, "gzip": true, "br": true} {
			r := jsonResp(status, ok)
			if coding != "" {
				r.Headers["Content-Encoding"] = coding
			}
			got := mustNew(t, StripeDefaults())().Classify(refundPI, r)
			if encoded && got.Outcome != rail.Ambiguous {
				t.Errorf("%d in %q = %v (%q), want ambiguous", status, coding, got.Outcome, got.Reason)
			}
			if !encoded && got.Outcome == rail.Ambiguous {
				t.Errorf("%d in %q = ambiguous (%q), want it read", status, coding, got.Reason)
			}
		}
	}
}

// TestClassifyRefusesMembersReadTwoWays: a member named twice, or in two
// cases, is read one way here and another by the agent's client.
func TestClassifyRefusesMembersReadTwoWays(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want rail.Outcome
	}{
		{"as_sent", result(toolkitRefund("re_1", 1500), false), rail.Applied},
		{"entity_amount_twice", result(`{"id":"re_1","amount":99,"amount":1500}`, false), rail.Ambiguous},
		{"entity_amount_case_variant", result(`{"id":"re_1","amount":1500,"AMOUNT":99}`, false), rail.Ambiguous},
		{"entity_amount_in_other_case", result(`{"id":"re_1","Amount":99}`, false), rail.Ambiguous},
		{"entity_id_in_other_case", result(`{"ID":"re_1","id":"re_2","amount":1500}`, false), rail.Ambiguous},
		{"is_error_case_variant", strings.Replace(result(toolkitRefund("re_1", 1500), false), `"result":{"content"`, `"result":{"isError":true,"ISERROR":false,"content"`, 1), rail.Ambiguous},
		{"result_twice", `{"jsonrpc":"2.0","id":1,"result":{"content":[]},"result":{"content":[{"type":"text","text":"{\"id\":\"re_1\",\"amount\":1500}"}]}}`, rail.Ambiguous},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mustNew(t, StripeDefaults())().Classify(refundPI, jsonResp(200, tc.body))
			if got.Outcome != tc.want {
				t.Fatalf("Classify(%s) = %v (%q), want %v", tc.body, got.Outcome, got.Reason, tc.want)
			}
		})
	}
}
