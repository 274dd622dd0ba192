package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

// TestConcurrentIdenticalRefundsMoveMoneyOnce: 200 agents send the same
// refund at once through Envoy's protocols; the rail applies it once, the
// ledger holds one intent, and every other caller is told "in progress" or
// gets the stored result.
func TestConcurrentIdenticalRefundsMoveMoneyOnce(t *testing.T) {
	// Until the intent exists, each caller reads the payment at the rail:
	// far more than one agent's default rail reads allow at once.
	e := newRailEnv(t, envOptions{serveEnv: []string{unlimitedRailReads, unlimitedDecisions}})
	e.payment("stripe", "pi_conc_1", 10000, "usd")
	const n = 200
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}, Timeout: 60 * time.Second}
	var wg sync.WaitGroup
	responses := make([]agentResponse, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			responses[i] = e.stripeRefund(client, url.Values{"payment_intent": {"pi_conc_1"}, "amount": {"2500"}})
		}()
	}
	close(start)
	wg.Wait()

	applied, inProgress, replayed := 0, 0, 0
	for i, r := range responses {
		switch {
		case r.Status == 200 && r.Header.Get("x-countersign-replay") == "true":
			replayed++
		case r.Status == 200:
			applied++
		case r.Status == 409 && strings.Contains(r.Body, "in progress"):
			inProgress++
		default:
			t.Errorf("caller %d got %d %s", i, r.Status, r.Body)
		}
	}
	if applied != 1 {
		t.Fatalf("%d callers saw the rail's own 200, want exactly 1 (in progress %d, replayed %d)", applied, inProgress, replayed)
	}
	j := e.journal()
	if got := j.effectsOn("pi_conc_1"); got != 1 {
		t.Fatalf("the rail applied %d refunds, want exactly 1", got)
	}
	its := e.settle("pi_conc_1", 10*time.Second)
	if len(its) != 1 || its[0].State != intent.Applied || its[0].RailEntityID != j.Effects[0].EntityID {
		t.Fatalf("ledger intents %+v do not match the journal's effect %+v", its, j.Effects)
	}
	// A later identical request gets the stored result, rail untouched.
	before := len(e.journal().Requests)
	r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_conc_1"}, "amount": {"2500"}})
	if r.Status != 200 || r.Header.Get("x-countersign-replay") != "true" || !strings.Contains(r.Body, its[0].RailEntityID) {
		t.Fatalf("duplicate after APPLIED: %d %s", r.Status, r.Body)
	}
	if after := len(e.journal().Requests); after != before {
		t.Fatalf("the duplicate reached the rail (%d requests before, %d after)", before, after)
	}
	t.Logf("200 callers: 1 applied, %d told in progress, %d given the stored result", inProgress, replayed)
}

// TestTwoProcessesRaceOnOneIntent: two countersign processes on one ledger,
// each behind its own egress proxy, receive the same refund from 100
// concurrent callers split between them; the rail applies it once.
func TestTwoProcessesRaceOnOneIntent(t *testing.T) {
	e := newRailEnv(t, envOptions{serveEnv: []string{unlimitedRailReads, unlimitedDecisions}})
	second := e.secondCountersign()
	e.payment("stripe", "pi_race", 10000, "usd")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}, Timeout: 60 * time.Second}
	const n = 100
	var wg sync.WaitGroup
	statuses := make([]int, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			base := e.proxy
			if i%2 == 1 {
				base = second
			}
			statuses[i] = e.stripeRefundVia(base, client, url.Values{"payment_intent": {"pi_race"}, "amount": {"1234"}}).Status
		}()
	}
	close(start)
	wg.Wait()
	for i, s := range statuses {
		if s != 200 && s != 409 {
			t.Errorf("caller %d got %d", i, s)
		}
	}
	if got := e.journal().effectsOn("pi_race"); got != 1 {
		t.Fatalf("the rail applied %d refunds across two processes, want 1", got)
	}
	if its := e.settle("pi_race", 10*time.Second); len(its) != 1 || its[0].State != intent.Applied {
		t.Fatalf("ledger: %d intents, first %s", len(its), its[0].State)
	}
}
