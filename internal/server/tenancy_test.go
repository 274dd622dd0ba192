package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/envoystandin"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// secondOwner is another owner of the same deployment, with one agent and
// an execute credential, and nothing else: no grant, no mandate.
type secondOwner struct {
	id, agentID, secret string
}

func newSecondOwner(t *testing.T, h *allowHarness) secondOwner {
	t.Helper()
	ctx := context.Background()
	o, _, _, err := ownerauth.Bootstrap(ctx, h.store, "second owner", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a, err := h.store.CreateAgent(ctx, o.ID, "second owner's agent")
	if err != nil {
		t.Fatal(err)
	}
	secret, hash, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.IssueCredential(ctx, a.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash); err != nil {
		t.Fatal(err)
	}
	return secondOwner{id: o.ID, agentID: a.ID, secret: secret}
}

// egress is the Envoy stand-in in front of h's mock rail: ext_authz and
// ext_proc on Countersign, the route naming acct_bench.
func egress(t *testing.T, h *allowHarness) string {
	t.Helper()
	p, err := envoystandin.Start(context.Background(), envoystandin.Config{
		ExtAuthz: h.envoyAddr, ExtProc: h.envoyAddr, MaxRequestBytes: 64 << 10, AllowPartialMessage: true,
		// Generous bounds: the test asserts answers, not latency, on a
		// machine shared with other builds.
		Timeout: 30 * time.Second, ExtProcMessageTimeout: 30 * time.Second,
		Routes: []envoystandin.Route{{Prefix: "*", Upstream: h.mockURL, HostRewrite: "api.stripe.com",
			ContextExtensions: map[string]string{"rail_account": "acct_bench"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return "http://" + p.Addr()
}

type answer struct {
	status  int
	body    string
	headers http.Header
}

// refundVia sends the agent's Stripe refund through the egress proxy, the
// way an unmodified SDK would.
func refundVia(t *testing.T, base, secret, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/refunds", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "api.stripe.com"
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, body: string(b), headers: resp.Header}
}

func refundsOf(j mockrail.Journal) int {
	n := 0
	for _, e := range j.Effects {
		if e.Kind == mockrail.KindRefund {
			n++
		}
	}
	return n
}

// A duplicate of owner A's refund sent by owner B's agent learns nothing
// of A's intent — no replay, no refund id, no intent id, no state — whether
// B holds no grant of the account (the scope gate refuses it as it would
// any request) or shares the account with a mandate of its own (a refusal
// that names nothing). Only agents of A get A's stored answer. The mock
// rail's journal shows one refund throughout.
func TestAnotherOwnersAgentLearnsNothingOfAnIntent(t *testing.T) {
	h := railHarness(t) // owner A: its agent, a grant of acct_bench and a mandate
	base := egress(t, h)
	const body = "payment_intent=pi_bench&amount=1000"

	first := refundVia(t, base, h.secret, body)
	if first.status != http.StatusOK || !strings.Contains(first.body, `"re_`) {
		t.Fatalf("A's refund = %d %s", first.status, first.body)
	}
	ctx := context.Background()
	its, err := h.store.OwnerIntents(ctx, h.ownerID, ledger.IntentFilter{}, nil, 10)
	if err != nil || len(its) != 1 || its[0].RailEntityID == "" {
		t.Fatalf("A's intents = %+v, %v", its, err)
	}
	it := its[0]
	again := refundVia(t, base, h.secret, body)
	if again.status != http.StatusOK || again.headers.Get("x-countersign-replay") != "true" || !strings.Contains(again.body, it.RailEntityID) {
		t.Fatalf("A's own duplicate must replay: %d %v %s", again.status, again.headers, again.body)
	}

	// What B's agent may not learn.
	secrets := []string{it.SIK, it.RailEntityID, "already applied", "in progress", "replay", "intent"}
	learnsNothing := func(t *testing.T, a answer) {
		t.Helper()
		if a.status == http.StatusOK || a.status == http.StatusConflict {
			t.Fatalf("B's duplicate answered %d %s", a.status, a.body)
		}
		for _, s := range secrets {
			if strings.Contains(a.body, s) {
				t.Fatalf("B's answer names %q: %s", s, a.body)
			}
		}
		for k, v := range a.headers {
			vals := strings.Join(v, ",")
			switch lk := strings.ToLower(k); {
			case lk == "x-countersign-replay", lk == "x-countersign-settled-by",
				strings.Contains(vals, it.SIK), strings.Contains(vals, it.RailEntityID):
				t.Fatalf("B's answer carries %s: %v", k, v)
			}
		}
	}
	b := newSecondOwner(t, h)

	t.Run("B holds no grant: refused by scope, like any request", func(t *testing.T) {
		a := refundVia(t, base, b.secret, body)
		learnsNothing(t, a)
		if !strings.Contains(a.body, "mandate_missing") {
			t.Fatalf("want the scope gate's refusal: %d %s", a.status, a.body)
		}
		// The same words as for a refund nobody ever made.
		fresh := refundVia(t, base, b.secret, "payment_intent=pi_bench&amount=1001")
		if fresh.status != a.status || fresh.body != a.body {
			t.Fatalf("a duplicate is told apart from a fresh request:\n dup   %s\n fresh %s", a.body, fresh.body)
		}
	})

	t.Run("B cannot mandate on A's account", func(t *testing.T) {
		m := mandateFor(h)
		m.AgentId = b.agentID
		rec, err := mandateRecord(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.CreateMandate(ctx, rec); err == nil {
			t.Fatal("B stored a mandate on an account it does not hold")
		}
	})

	t.Run("B shares the account with a mandate of its own: a refusal that names nothing", func(t *testing.T) {
		grantAll(t, h.store, b.agentID, "acct_bench") // the operator grants B the account too
		a := refundVia(t, base, b.secret, body)
		learnsNothing(t, a)
		if !strings.Contains(a.body, "action_unavailable") {
			t.Fatalf("want action_unavailable: %d %s", a.status, a.body)
		}
	})

	// B still shares the account (the subtest above granted it).
	t.Run("while A's refund is at the rail, B's duplicate meets it in the ledger and learns nothing", func(t *testing.T) {
		// A's agent speaks ext_authz directly: the attempt is IN_FLIGHT
		// until a commit that never comes here.
		const inflight = "payment_intent=pi_bench&amount=2000"
		chk := h.request(1)
		chk.Attributes.Request.Http.Body = inflight
		resp, err := h.client.Check(ctx, chk)
		if err != nil || resp.GetStatus().GetCode() != 0 {
			t.Fatalf("A's check = %v, %v", resp, err)
		}
		mine := refundVia(t, base, h.secret, inflight)
		if mine.status != http.StatusConflict || !strings.Contains(mine.body, "in progress") {
			t.Fatalf("A's own duplicate in flight = %d %s", mine.status, mine.body)
		}
		theirs := refundVia(t, base, b.secret, inflight)
		learnsNothing(t, theirs)
		// The same words whatever the state of A's intent.
		if applied := refundVia(t, base, b.secret, body); !strings.Contains(theirs.body, "action_unavailable") || theirs.body != applied.body {
			t.Fatalf("B's duplicate of an in-flight intent = %d %s; want the same action_unavailable as for an applied one", theirs.status, theirs.body)
		}
	})

	t.Run("another agent of A gets A's answer", func(t *testing.T) {
		a2, err := h.store.CreateAgent(ctx, h.ownerID, "A's second agent")
		if err != nil {
			t.Fatal(err)
		}
		secret, hash, err := credential.Generate()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.IssueCredential(ctx, a2.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash); err != nil {
			t.Fatal(err)
		}
		grantAll(t, h.store, a2.ID, "acct_bench")
		r := refundVia(t, base, secret, body)
		if r.status != http.StatusOK || !strings.Contains(r.body, it.RailEntityID) {
			t.Fatalf("A's second agent = %d %s, want the replay", r.status, r.body)
		}
	})

	if n := refundsOf(h.mock.Journal()); n != 1 {
		t.Fatalf("the rail applied %d refunds, want exactly 1", n)
	}
}
