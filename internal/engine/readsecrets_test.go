package engine

import (
	"context"
	"testing"
)

// TestPaymentIntentReadNeedsExtProc: a Stripe PaymentIntent's answer
// carries its client_secret, which only ext_proc removes, so the read is
// refused where no ext_proc will see the answer (a native caller's, ext_proc
// out of the path, a route naming no rail account: found by a review), and
// allowed where one will; a refund list's answer carries none and is
// allowed either way.
func TestPaymentIntentReadNeedsExtProc(t *testing.T) {
	for _, tc := range []struct {
		name        string
		source      Source
		extProc     bool
		railAccount string
		path        string
		want        string
	}{
		{"ext_proc in the path", SourceExtAuthz, true, "acct_1", "/v1/payment_intents/pi_1", ReasonReadAllowed},
		{"ext_proc out of the path", SourceExtAuthz, false, "acct_1", "/v1/payment_intents/pi_1", ReasonReadNeedsExtProc},
		{"a route naming no rail account", SourceExtAuthz, true, "", "/v1/payment_intents/pi_1", ReasonReadNeedsExtProc},
		{"a native caller", SourceDecide, true, "acct_1", "/v1/payment_intents/pi_1", ReasonReadNeedsExtProc},
		{"a refund list without ext_proc", SourceExtAuthz, false, "acct_1", "/v1/refunds?limit=3", ReasonReadAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.e.opts.ExtProcInPath = tc.extProc
			req := r.refund()
			req.Method, req.Path, req.Body, req.Headers = "GET", tc.path, nil, map[string]string{}
			req.Source, req.RailAccount = tc.source, tc.railAccount
			if out := r.e.Decide(context.Background(), req); out.ReasonCode != tc.want {
				t.Fatalf("%s: %s %s: %s; want %s", tc.path, out.Verdict, out.ReasonCode, out.Reason, tc.want)
			}
		})
	}
}
