package engine

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
)

// A label member's name is the agent's text; with free_text: hold it is
// named in the hold's reason, which leaves in the signed intent.held
// webhook. It arrives there percent-encoded, with no markup a receiver's
// dashboard, Slack or model would act on, while an ordinary name reads as
// it is.
func TestHeldReasonInTheWebhookCarriesNoAgentMarkup(t *testing.T) {
	const img, slack = `<img src=x onerror=alert(1)>"'`, "<https://x.co|APPROVE>`" // within Stripe's 40 characters
	r := newRig(t, func(m *countersignv1.Mandate) { m.FreeText = countersignv1.FreeText_FREE_TEXT_HOLD })
	ctx := context.Background()
	out := r.e.Decide(ctx, r.refundWith("metadata["+url.QueryEscape(img)+"]=x&metadata["+url.QueryEscape(slack)+"]=y&metadata[order_id]=7"))
	if out.Intent == nil {
		t.Fatalf("no intent: %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	evs, err := r.store.EventsOf(ctx, ledger.Key{RailAccount: out.Intent.RailAccount, SIK: out.Intent.SIK})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, e := range evs {
		if e.Type != "intent.held" {
			continue
		}
		held++
		var p struct {
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"metadata[order_id]", "metadata[%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E%22%27]",
			"metadata[%3Chttps%3A%2F%2Fx.co%7CAPPROVE%3E%60]"} {
			if !strings.Contains(p.Reason, want) {
				t.Errorf("intent.held reason %q does not name %s", p.Reason, want)
			}
		}
		// The reason's own sentence has spaces and an apostrophe of ours
		// at most; none of the agent's markup.
		for _, c := range "<>|\"`\n\r\t" {
			if strings.ContainsRune(p.Reason, c) {
				t.Errorf("intent.held reason carries %q: %q", c, p.Reason)
			}
		}
		if strings.Contains(p.Reason, "onerror=") || strings.Contains(p.Reason, "https://") {
			t.Errorf("intent.held reason carries the agent's markup: %q", p.Reason)
		}
	}
	if held != 1 {
		t.Fatalf("%d intent.held events, want 1 (events %v)", held, evs)
	}
}
