package engine

import (
	"context"
	"net/url"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// TestAValueUnderTheStampKeyIsCountersignsOrRefused: where no ext_proc
// writes the body stamp over what the agent sent (ext_authz alone, a
// native caller), the value under metadata[countersign_sik] leaves as
// sent, in metadata the rail stores, seen by no label: it is refused
// unless it is the stamp this decision writes, whatever free_text says
// (a card number passed free_text: refuse; another intent's stamp would be
// taken for that intent's by the reconciler). Through Countersign's own
// routes with ext_proc in the path it is overwritten, and passes.
func TestAValueUnderTheStampKeyIsCountersignsOrRefused(t *testing.T) {
	ctx := context.Background()
	card := "metadata[countersign_sik]=" + url.QueryEscape("4111111111111111 12/29 123")
	for _, policy := range []countersignv1.FreeText{countersignv1.FreeText_FREE_TEXT_REFUSE, countersignv1.FreeText_FREE_TEXT_ALLOW} {
		t.Run(policy.String(), func(t *testing.T) {
			r := newRig(t, func(m *countersignv1.Mandate) { m.FreeText = policy })
			if out := r.e.Decide(ctx, r.refundWith(card)); out.Verdict != Block || out.ReasonCode != ReasonForeignStamp {
				t.Fatalf("card under the stamp key = %s %s: %s; want BLOCK %s", out.Verdict, out.ReasonCode, out.Reason, ReasonForeignStamp)
			}
			first := r.e.Decide(ctx, r.refund())
			if first.Verdict != Allow || first.Intent == nil || first.Intent.BodyValue == "" {
				t.Fatalf("unstamped = %s %s: %s", first.Verdict, first.ReasonCode, first.Reason)
			}
			stamp := "metadata[countersign_sik]=" + url.QueryEscape(first.Intent.BodyValue)
			// Another request carrying the first one's stamp.
			other := r.refundWith(stamp)
			other.Body = []byte("payment_intent=pi_1&amount=500&" + stamp)
			if out := r.e.Decide(ctx, other); out.Verdict != Block || out.ReasonCode != ReasonForeignStamp {
				t.Fatalf("another intent's stamp = %s %s: %s; want BLOCK %s", out.Verdict, out.ReasonCode, out.Reason, ReasonForeignStamp)
			}
			// The same request sent again with its own stamp is that request.
			if out := r.e.Decide(ctx, r.refundWith(stamp)); out.ReasonCode != ReasonDuplicateInFlight {
				t.Fatalf("its own stamp = %s %s: %s; want %s", out.Verdict, out.ReasonCode, out.Reason, ReasonDuplicateInFlight)
			}
		})
	}
	t.Run("ext_proc_overwrites", func(t *testing.T) {
		r := newRig(t)
		r.e = rebuilt(r.e, func(o *Options) { o.ExtProcInPath = true })
		req := r.refundWith(card)
		req.RailAccount = "acct_1"
		if out := r.e.Decide(ctx, req); out.Verdict != Allow {
			t.Fatalf("through ext_proc = %s %s: %s; want ALLOW (ext_proc writes the stamp over it)", out.Verdict, out.ReasonCode, out.Reason)
		}
		// The same request through a route without ext_proc is refused.
		req = r.refundWith("metadata[countersign_sik]=" + url.QueryEscape("4111111111111111 12/30 456"))
		if out := r.e.Decide(ctx, req); out.ReasonCode != ReasonForeignStamp {
			t.Fatalf("no ext_proc on the route = %s %s: %s; want %s", out.Verdict, out.ReasonCode, out.Reason, ReasonForeignStamp)
		}
	})
}
