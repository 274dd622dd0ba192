package e2e

import (
	"net/url"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

// TestCrashMidFlightRecoversAtBoot: countersign is SIGKILLed while an
// allowed refund is at the rail, so nobody commits the answer. A new
// process finds the expired attempt lease at boot, reconciles it against
// the rail, and the ledger ends APPLIED with the rail's entity — never two
// refunds, never unknown forever.
func TestCrashMidFlightRecoversAtBoot(t *testing.T) {
	e := newRailEnv(t, envOptions{leaseTTL: 2 * time.Second, reconcileDelay: time.Second, routeTimeout: 10 * time.Second})
	e.payment("stripe", "pi_crash", 10000, "usd")
	e.fault(map[string]any{"profile": "slow", "delay": "2s", "count": 1, "method": "POST", "path": "/v1/refunds"})
	done := make(chan agentResponse, 1)
	go func() {
		done <- e.stripeRefund(nil, url.Values{"payment_intent": {"pi_crash"}, "amount": {"3000"}})
	}()
	// Wait until the attempt is durable (the request is on its way), then crash.
	deadline := time.Now().Add(10 * time.Second)
	for {
		its := e.intentsOn("pi_crash")
		if len(its) == 1 && its[0].State == intent.InFlight {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no IN_FLIGHT intent: %+v", its)
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.restartCountersign()
	r := <-done
	t.Logf("agent saw %d %.120s", r.Status, r.Body)

	// The crash may land before ext_proc let the request go (then it never
	// left and the reconciler proves it absent) or after (then the rail
	// applies it and the reconciler finds it). Either way it settles.
	its := e.settle("pi_crash", 30*time.Second)
	j := e.journal()
	switch j.effectsOn("pi_crash") {
	case 0:
		if its[0].State != intent.ConfirmedNotApplied {
			t.Fatalf("nothing applied, but the ledger says %s (%s)", its[0].State, its[0].Reason)
		}
		if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_crash"}, "amount": {"3000"}}); r.Status != 200 {
			t.Fatalf("retry after proven absence: %d %s", r.Status, r.Body)
		}
		its = e.settle("pi_crash", 10*time.Second)
		j = e.journal()
	case 1:
	default:
		t.Fatalf("the rail applied %d refunds", j.effectsOn("pi_crash"))
	}
	if j.effectsOn("pi_crash") != 1 || its[0].State != intent.Applied || its[0].RailEntityID != j.Effects[0].EntityID {
		t.Fatalf("ledger %s/%s (%s), journal %+v", its[0].State, its[0].RailEntityID, its[0].Reason, j.Effects)
	}
	// The agent's retry gets the stored result.
	if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_crash"}, "amount": {"3000"}}); r.Header.Get("x-countersign-replay") != "true" {
		t.Fatalf("retry after recovery: %d %s", r.Status, r.Body)
	}
	if e.journal().effectsOn("pi_crash") != 1 {
		t.Fatal("the retry reached the rail")
	}
}
