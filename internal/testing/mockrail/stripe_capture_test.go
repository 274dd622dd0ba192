package mockrail

import (
	"testing"
)

func TestStripeCapture(t *testing.T) {
	auth := Payment{Rail: Stripe, ID: "pi_5005", Amount: 8000, Currency: "usd", Status: "requires_capture"}
	authCh := Payment{Rail: Stripe, ID: "ch_6006", Amount: 3000, Currency: "usd", Status: "requires_capture"}
	r := newRail(t, WithPayments(piUSD, auth, authCh))

	// Uncaptured, nothing is refundable.
	wantStatus(t, r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_5005", "amount", "100"), ""), 400)
	x := r.stripe("POST", "/v1/payment_intents/pi_5005/capture", form("amount_to_capture", "9000"), "")
	wantStatus(t, x, 400)
	wantContains(t, x, "amount_too_large")
	x = r.stripe("POST", "/v1/payment_intents/pi_5005/capture", form("amount_to_capture", "6000"), "k-cap")
	wantStatus(t, x, 200)
	if x.str(t, "status") != "succeeded" || x.num(t, "amount_received") != 6000 {
		t.Fatalf("captured intent: %s", x.body)
	}
	// The same key replays; a second capture is refused.
	if y := r.stripe("POST", "/v1/payment_intents/pi_5005/capture", form("amount_to_capture", "6000"), "k-cap"); y.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("not replayed: %d %s", y.status, y.body)
	}
	wantContains(t, r.stripe("POST", "/v1/payment_intents/pi_5005/capture", nil, ""), "payment_intent_unexpected_state")
	wantContains(t, r.stripe("POST", "/v1/payment_intents/pi_1001/capture", nil, ""), "payment_intent_unexpected_state")
	// What was captured is refundable, no more.
	wantContains(t, r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_5005", "amount", "6001"), ""), "amount_too_large")
	wantStatus(t, r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_5005", "amount", "6000"), ""), 200)
	// A bare charge, captured whole.
	x = r.stripe("POST", "/v1/charges/ch_6006/capture", nil, "")
	wantStatus(t, x, 200)
	if x.field(t, "captured") != true || x.num(t, "amount_captured") != 3000 {
		t.Fatalf("captured charge: %s", x.body)
	}
	wantStatus(t, r.stripe("POST", "/v1/charges/ch_6006/capture", form("amount_to_capture", "1"), ""), 400) // the intent's parameter

	var caps []Effect
	for _, e := range r.srv.Journal().Effects {
		if e.Kind == KindCapture {
			caps = append(caps, e)
		}
	}
	if len(caps) != 2 || caps[0].Subject != "pi_5005" || caps[0].Amount != 6000 || caps[0].IdempotencyKey != "k-cap" ||
		caps[1].Subject != "ch_6006" || caps[1].Amount != 3000 {
		t.Fatalf("capture effects: %+v", caps)
	}
}

func TestStripePayoutUpdateAndCancel(t *testing.T) {
	r := newRail(t)
	po := r.stripe("POST", "/v1/payouts", form("amount", "120000", "currency", "usd", "destination", "ba_landlord"), "")
	wantStatus(t, po, 200)
	id := po.str(t, "id")

	// A scheduled payout's destination and amount cannot change.
	x := r.stripe("POST", "/v1/payouts/"+id, form("destination", "ba_attacker"), "")
	wantStatus(t, x, 400)
	wantContains(t, x, "parameter_unknown")
	wantStatus(t, r.stripe("POST", "/v1/payouts/"+id, form("amount", "1"), ""), 400)
	x = r.stripe("POST", "/v1/payouts/"+id, form("metadata[note]", "april"), "")
	wantStatus(t, x, 200)
	if x.str(t, "metadata", "note") != "april" || x.str(t, "destination") != "ba_landlord" {
		t.Fatalf("updated payout: %s", x.body)
	}
	wantStatus(t, r.stripe("POST", "/v1/payouts/po_nope/cancel", nil, ""), 404)
	x = r.stripe("POST", "/v1/payouts/"+id+"/cancel", nil, "")
	wantStatus(t, x, 200)
	if x.str(t, "status") != "canceled" || r.stripe("GET", "/v1/payouts/"+id, nil, "").str(t, "status") != "canceled" {
		t.Fatalf("cancelled payout: %s", x.body)
	}
	wantContains(t, r.stripe("POST", "/v1/payouts/"+id+"/cancel", nil, ""), "payout_not_cancelable")
	if n := len(ids(t, r.stripe("GET", "/v1/payouts", form("status", "canceled"), ""))); n != 1 {
		t.Fatalf("%d cancelled payouts listed", n)
	}
	effects := r.srv.Journal().Effects
	if len(effects) != 2 || effects[1].Kind != KindPayoutCancel || effects[1].EntityID != id || effects[1].Amount != 120000 {
		t.Fatalf("effects: %+v", effects)
	}
}
