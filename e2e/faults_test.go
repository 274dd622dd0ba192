package e2e

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

// TestFaultProfilesReconcileToTheJournal: for each fault the rail can throw
// at an allowed refund, the reconciler settles the intent to what the rail
// really did; a proven-absent refund is retried once and applied once.
func TestFaultProfilesReconcileToTheJournal(t *testing.T) {
	cases := []struct {
		name        string
		rule        map[string]any
		mockFlags   []string
		wantApplied bool // did the faulted request apply at the rail?
	}{
		{"none", nil, nil, true},
		{"timeout after apply", map[string]any{"profile": "timeout_after_apply", "count": 1, "method": "POST", "path": "/v1/refunds"}, nil, true},
		{"reset before apply", map[string]any{"profile": "reset_before_apply", "count": 1, "method": "POST", "path": "/v1/refunds"}, nil, false},
		{"5xx after apply", map[string]any{"profile": "5xx_after_apply", "count": 1, "method": "POST", "path": "/v1/refunds"}, nil, true},
		{"replayed response", map[string]any{"profile": "replay_other", "count": 1, "method": "POST", "path": "/v1/refunds"}, nil, true},
		// Lists lag 1s behind writes; the reconciler's minimum delay (2s)
		// outlasts it, so the applied refund is seen, not taken as absent.
		{"replica lag with timeout", map[string]any{"rules": []map[string]any{
			{"profile": "timeout_after_apply", "count": 1, "method": "POST", "path": "/v1/refunds"},
			{"profile": "replica_lag", "delay": "1s"},
		}}, nil, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newRailEnv(t, envOptions{reconcileDelay: 2 * time.Second, routeTimeout: 2 * time.Second})
			pay := fmt.Sprintf("pi_fault_%d", i)
			e.payment("stripe", pay, 10000, "usd")
			// An earlier refund, so a replayed response has something to replay.
			if r := e.stripeRefund(nil, url.Values{"payment_intent": {pay}, "amount": {"100"}}); r.Status != 200 {
				t.Fatalf("warm-up refund: %d %s", r.Status, r.Body)
			}
			if tc.rule != nil {
				e.fault(tc.rule)
			}
			form := url.Values{"payment_intent": {pay}, "amount": {"4000"}}
			first := e.stripeRefund(nil, form)
			t.Logf("agent saw %d %.200s", first.Status, first.Body)

			its := e.settle(pay, 30*time.Second)
			target := its[len(its)-1]
			j := e.journal()
			var entity string
			for _, f := range j.Effects {
				if f.Subject == pay && f.Amount == 4000 {
					entity = f.EntityID
				}
			}
			if tc.wantApplied != (entity != "") {
				t.Fatalf("journal: applied=%v, want %v", entity != "", tc.wantApplied)
			}
			if tc.wantApplied {
				if target.State != intent.Applied || target.RailEntityID != entity {
					t.Fatalf("ledger %s/%s, journal %s", target.State, target.RailEntityID, entity)
				}
			} else {
				if target.State != intent.ConfirmedNotApplied {
					t.Fatalf("ledger %s (%s), want CONFIRMED_NOT_APPLIED", target.State, target.Reason)
				}
				// One retry applies it exactly once.
				if r := e.stripeRefund(nil, form); r.Status != 200 {
					t.Fatalf("retry: %d %s", r.Status, r.Body)
				}
				its = e.settle(pay, 10*time.Second)
				target = its[len(its)-1]
				if target.State != intent.Applied {
					t.Fatalf("after retry: %s", target.State)
				}
			}
			n := 0
			for _, f := range e.journal().Effects {
				if f.Subject == pay && f.Amount == 4000 {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("the rail applied the refund %d times, want 1", n)
			}
			// A further identical request never reaches the rail again: it
			// gets the rail's stored answer, or (when reconciliation settled
			// it) a 409 naming the entity.
			before := len(e.journal().Requests)
			r := e.stripeRefund(nil, form)
			replayed := r.Status == 200 || r.Status == 409 && strings.Contains(r.Body, target.RailEntityID)
			if r.Header.Get("x-countersign-replay") != "true" || !replayed {
				t.Fatalf("duplicate after settling: %d %s", r.Status, r.Body)
			}
			if after := len(e.journal().Requests); after != before {
				t.Fatalf("the duplicate reached the rail")
			}
		})
	}
}
