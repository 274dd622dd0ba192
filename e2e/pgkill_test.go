package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// TestPostgresKilledMidFlight SIGKILLs PostgreSQL while agents send a
// stream of distinct refunds, restarts it (crash recovery), and lets the
// reconciler settle everything. Afterwards the ledger and the rail's
// journal agree: every refund the rail applied is one APPLIED intent with
// that entity, nothing is applied twice, and nothing is left unknown.
func TestPostgresKilledMidFlight(t *testing.T) {
	var cluster *pgtest.Cluster
	e := newRailEnv(t, envOptions{cluster: &cluster, leaseTTL: 2 * time.Second, reconcileDelay: time.Second})
	e.payment("stripe", "pi_pgkill", 1_000_000_000, "usd")
	client := &http.Client{Timeout: 15 * time.Second}
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				amount := n.Add(1)
				e.stripeRefund(client, url.Values{"payment_intent": {"pi_pgkill"}, "amount": {fmt.Sprint(amount)}})
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	if err := cluster.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := cluster.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	its := e.settle("pi_pgkill", 60*time.Second)
	j := e.journal()
	applied := map[int64]string{} // amount → entity
	for _, f := range j.Effects {
		if f.Subject != "pi_pgkill" {
			continue
		}
		if prev, dup := applied[f.Amount]; dup {
			t.Fatalf("refund of %d applied twice: %s and %s", f.Amount, prev, f.EntityID)
		}
		applied[f.Amount] = f.EntityID
	}
	ledgerApplied := 0
	for _, it := range its {
		switch it.State {
		case intent.Applied:
			ledgerApplied++
			if applied[it.AmountMinor] != it.RailEntityID {
				t.Errorf("intent for %d is APPLIED as %s, the rail says %q", it.AmountMinor, it.RailEntityID, applied[it.AmountMinor])
			}
		case intent.Unknown, intent.Reconciling, intent.InFlight:
			t.Errorf("intent for %d still %s", it.AmountMinor, it.State)
		default:
			if applied[it.AmountMinor] != "" {
				t.Errorf("intent for %d is %s but the rail applied %s", it.AmountMinor, it.State, applied[it.AmountMinor])
			}
		}
	}
	if ledgerApplied != len(applied) {
		t.Fatalf("%d intents APPLIED, %d refunds at the rail", ledgerApplied, len(applied))
	}
	t.Logf("%d requests, %d intents, %d applied at the rail", n.Load(), len(its), len(applied))
}
