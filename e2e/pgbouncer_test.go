package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/testing/envoystandin"
	"github.com/countersign/countersign/internal/testing/pgbouncer"
)

// TestManySidecarsShareOneLedgerThroughPgBouncer: eight countersign serve
// processes, each behind its own Envoy stand-in, reach one PostgreSQL only
// through one PgBouncer in transaction pooling mode with fewer server
// connections than they have clients. An identical refund sent through all
// of them moves money once; then twelve distinct refunds, each sent through
// two of them, race for a budget that fits exactly five: five are applied,
// once each, and the budget row never holds more than the budget.
func TestManySidecarsShareOneLedgerThroughPgBouncer(t *testing.T) {
	const (
		sidecars   = 8
		serverConn = 6 // PgBouncer's server connections, shared by all
		amount     = 500
		distinct   = 12
		fits       = 5 // distinct refunds the budget leaves room for
	)
	var bouncer *pgbouncer.Bouncer
	e := newRailEnv(t, envOptions{
		noMandate: true,
		dbURLRewrite: func(direct string) string {
			bouncer = pgbouncer.New(t, direct, pgbouncer.Options{PoolSize: serverConn})
			return bouncer.URL(direct)
		},
		serveEnv: []string{"COUNTERSIGN_DB_POOLER=pgbouncer"},
	})
	hash := applyMandate(t, e.store, budgetedMandate(e.agentID, (1+fits)*amount))
	proxies := append([]string{e.proxy}, e.sidecars(sidecars-1)...)

	// Every sidecar's pool is a PgBouncer client; the server sees at most
	// serverConn connections.
	clients, servers := e.poolerPeers(t, bouncer)
	if clients < sidecars || servers > serverConn {
		t.Fatalf("PgBouncer has %d client and %d server connections; want >= %d clients sharing <= %d servers", clients, servers, sidecars, serverConn)
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	e.payment("stripe", "pi_pgb_same", 10000, "usd")
	for i := range distinct {
		e.payment("stripe", fmt.Sprintf("pi_pgb_%02d", i), 10000, "usd")
	}

	// Phase 1: the same refund from four callers on every sidecar, each
	// with a fresh SDK idempotency key.
	same := url.Values{"payment_intent": {"pi_pgb_same"}, "amount": {fmt.Sprint(amount)}}
	var sends []refundSend
	for i := range 4 * sidecars {
		sends = append(sends, refundSend{via: proxies[i%sidecars], form: same})
	}
	for i, r := range e.race(client, sends) {
		if inProgress := r.Status == 409 && strings.Contains(r.Body, "in progress"); r.Status != 200 && !inProgress {
			t.Errorf("identical caller %d got %d %s", i, r.Status, r.Body)
		}
	}
	if got := e.journal().effectsOn("pi_pgb_same"); got != 1 {
		t.Fatalf("the rail applied the identical refund %d times across %d sidecars, want 1", got, sidecars)
	}
	if its := e.settle("pi_pgb_same", 15*time.Second); len(its) != 1 || its[0].State != intent.Applied {
		t.Fatalf("ledger after the identical race: %+v", its)
	}

	// Phase 2: distinct refunds, each through two sidecars at once.
	sends = sends[:0]
	for i := range distinct {
		form := url.Values{"payment_intent": {fmt.Sprintf("pi_pgb_%02d", i)}, "amount": {fmt.Sprint(amount)}}
		sends = append(sends, refundSend{via: proxies[i%sidecars], form: form}, refundSend{via: proxies[(i+1)%sidecars], form: form})
	}
	for i, r := range e.race(client, sends) {
		if r.Status >= 500 {
			t.Errorf("distinct caller %d got %d %s", i, r.Status, r.Body)
		}
	}
	j := e.journal()
	applied := 0
	for i := range distinct {
		subject := fmt.Sprintf("pi_pgb_%02d", i)
		switch n := j.effectsOn(subject); n {
		case 0:
		case 1:
			applied++
			if its := e.settle(subject, 15*time.Second); len(its) != 1 || its[0].State != intent.Applied {
				t.Errorf("ledger on %s: %+v", subject, its)
			}
		default:
			t.Errorf("the rail applied %s %d times", subject, n)
		}
	}
	if applied != fits {
		t.Fatalf("%d distinct refunds applied, want exactly %d (the budget's room)", applied, fits)
	}
	budgets, err := e.store.Budgets(context.Background(), hash)
	if err != nil || len(budgets) != 1 {
		t.Fatalf("budget rows = %+v, %v", budgets, err)
	}
	if b := budgets[0]; b.Held+b.Spent > b.Budget || b.Spent != (1+fits)*amount {
		t.Fatalf("budget row %+v: want held+spent <= budget and spent = %d", b, (1+fits)*amount)
	}
	t.Logf("%d sidecars through PgBouncer (%d clients, %d servers): 1 identical refund applied, %d of %d distinct applied, budget %+v",
		sidecars, clients, servers, applied, distinct, budgets[0])
}

// budgetedMandate lets the agent refund USD on the Stripe account up to a
// total budget.
func budgetedMandate(agentID string, budget int64) *countersignv1.Mandate {
	now := time.Now().Truncate(time.Second)
	return &countersignv1.Mandate{
		Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: stripeAccount, AgentId: agentID, Purpose: "e2e pgbouncer",
		ValidFrom: timestamppb.New(now.Add(-time.Hour)), ValidUntil: timestamppb.New(now.Add(24 * time.Hour)),
		Mode: countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 1 << 40, Currencies: []string{"USD"}},
		},
		Budgets: []*countersignv1.Money{{AmountMinor: budget, Currency: "USD"}},
	}
}

// sidecars starts n more countersign serve processes on the environment's
// ledger URL, each with its own listeners, lease owner and Envoy stand-in,
// all at once, and returns the stand-ins' base URLs once every one is ready.
func (e *railEnv) sidecars(n int) []string {
	e.t.Helper()
	ready := make([]string, n)
	bases := make([]string, n)
	for i := range n {
		grpcAddr, httpAddr, envoyAddr := freeAddr(e.t), freeAddr(e.t), envoySocket(e.t)
		env := append(append([]string{}, e.csEnv...), "COUNTERSIGN_GRPC_ADDR="+grpcAddr, "COUNTERSIGN_HTTP_ADDR="+httpAddr,
			"COUNTERSIGN_ENVOY_ADDR="+envoyAddr, fmt.Sprintf("COUNTERSIGN_LEASE_OWNER=sidecar-%d", i+1))
		startProc(e.t, "countersign", env, "serve")
		ready[i] = "http://" + httpAddr + "/readyz"
		cfg := e.proxyCfg
		cfg.ExtAuthz, cfg.ExtProc = envoyAddr, envoyAddr
		ctx, cancel := context.WithCancel(context.Background())
		p, err := envoystandin.Start(ctx, cfg)
		if err != nil {
			cancel()
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { p.Close(); cancel() })
		bases[i] = "http://" + p.Addr()
	}
	for _, u := range ready {
		waitStatus(e.t, u, 200, 30*time.Second)
	}
	return bases
}

// poolerPeers counts PgBouncer's client and server connections to the
// ledger's database.
func (e *railEnv) poolerPeers(t *testing.T, b *pgbouncer.Bouncer) (clients, servers int) {
	t.Helper()
	db := e.dbURL[strings.LastIndex(e.dbURL, "/")+1:]
	if i := strings.IndexByte(db, '?'); i >= 0 {
		db = db[:i]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for what, n := range map[string]*int{"CLIENTS": &clients, "SERVERS": &servers} {
		rows, err := b.Show(ctx, what)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r["database"] == db {
				*n++
			}
		}
	}
	return clients, servers
}

// refundSend is one agent request: the form, through which stand-in.
type refundSend struct {
	via  string
	form url.Values
}

// race sends every request at once and returns the answers in order.
func (e *railEnv) race(client *http.Client, sends []refundSend) []agentResponse {
	out := make([]agentResponse, len(sends))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range sends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = e.stripeRefundVia(s.via, client, s.form)
		}()
	}
	close(start)
	wg.Wait()
	return out
}
