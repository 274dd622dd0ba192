package engine

import (
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// TestReplayedAnswerLosesItsClientSecrets: a duplicate of an applied
// intent is answered from the ledger, which keeps the rail's answer as it
// came; the replay reaches the caller (a native one with no ext_proc in
// its path too) without the client secrets in it (found by a review: a
// refund's stored answer, its PaymentIntent expanded, was replayed with
// the PaymentIntent's client_secret). The ledger's copy is not changed.
func TestReplayedAnswerLosesItsClientSecrets(t *testing.T) {
	acct := &rails.Account{ID: "acct_1", Rail: sik.RailStripe, Adapter: stripe.New()}
	req := Request{Method: http.MethodPost, Path: "/v1/refunds"}
	it := ledger.Intent{LastEvent: string(intent.RailApplied), RailEntityID: "re_1"}
	stored := `{"id":"re_1","object":"refund","payment_intent":{"id":"pi_1","client_secret":"pi_1_secret_abc",` +
		`"next_action":{"redirect_to_url":{"url":"https://hooks.stripe.com/x?payment_intent_client_secret=pi_1_secret_abc&k=pk_1"}}}}`
	want := `{"id":"re_1","object":"refund","payment_intent":{"id":"pi_1",` +
		`"next_action":{"redirect_to_url":{"url":"https://hooks.stripe.com/x?payment_intent_client_secret=[removed by Countersign]&k=pk_1"}}}}`
	for _, tc := range []struct {
		name string
		a    *ledger.Attempt
	}{
		{"the rail's stored answer", &ledger.Attempt{Response: &ledger.HTTPMessage{Status: 200, Headers: map[string]string{"content-type": "application/json"}, Body: []byte(stored)}}},
		{"the entity reconciliation found", &ledger.Attempt{FoundEntity: []byte(stored)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := replayApplied(acct, req, it, tc.a)
			if !out.Replayed || out.ReasonCode != ReasonDuplicateApplied || out.HTTPStatus != 200 {
				t.Fatalf("outcome = %+v, want a replay", out)
			}
			if got := string(out.Body); got != want {
				t.Fatalf("replayed %s\nwant %s", got, want)
			}
			kept := tc.a.FoundEntity
			if tc.a.Response != nil {
				kept = tc.a.Response.Body
			}
			if string(kept) != stored || strings.Contains(string(out.Body), "pi_1_secret_abc") {
				t.Fatalf("the ledger's copy changed (%s) or a secret is replayed (%s)", kept, out.Body)
			}
		})
	}
}
