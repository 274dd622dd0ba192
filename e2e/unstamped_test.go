package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

// TestUnstampedRequestIsNeverProvenAbsent: an allowed request that leaves
// without the body stamp, because its tool has no place for the stamp (an
// MCP create_refund without a metadata argument, whose server drops the
// idempotency key, as Stripe's toolkit does), is applied by the rail,
// which answers 500. No listing can show such a request, so the reconciler
// must not settle it CONFIRMED_NOT_APPLIED (which voids its hold and lets
// the same request through again): it ends QUARANTINED for a person, its
// attempt marked as having left unstamped, and the same request sent again
// moves no more money. Before, it paid twice. (A Razorpay full refund sent
// with no body was the other case; it now leaves stamped:
// TestBodilessFullRefundLeavesStamped.)
func TestUnstampedRequestIsNeverProvenAbsent(t *testing.T) {
	cases := []struct {
		name    string
		subject string
		send    func(e *railEnv, id int) agentResponse
	}{
		{"mcp tool without a metadata argument", "pi_nometa", func(e *railEnv, id int) agentResponse {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"create_refund","arguments":{"payment_intent":"pi_nometa","amount":2500}}}`, id)
			req, err := http.NewRequest(http.MethodPost, e.proxy+"/mcp", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "mcp.local"
			req.Header.Set("Authorization", "Bearer "+e.secret)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			return do(t, req)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeMCP{dropKey: true}
			srv := httptest.NewServer(f)
			t.Cleanup(srv.Close)
			e := newRailEnv(t, envOptions{mcpUpstream: srv.URL, mcpNoMetadata: true,
				serveEnv: []string{"COUNTERSIGN_RECONCILE_MAX_ATTEMPTS=2"}})
			f.rail.Store(e.mock)
			e.payment("razorpay", "pay_nobody", 50000, "INR")
			e.payment("stripe", "pi_nometa", 10000, "usd")
			e.fault(map[string]any{"profile": "5xx_after_apply", "count": 1, "method": "POST"})

			first := tc.send(e, 1)
			t.Logf("agent saw %d %.200s", first.Status, first.Body)
			if n := e.journal().effectsOn(tc.subject); n != 1 {
				t.Fatalf("the rail holds %d effects on %s, want the one it applied", n, tc.subject)
			}
			its := e.settle(tc.subject, 60*time.Second)
			if len(its) != 1 || its[0].State != intent.Quarantined {
				t.Fatalf("intents on %s: %+v; want one, QUARANTINED (never proven absent)", tc.subject, its)
			}
			_, ats, err := e.store.GetIntent(context.Background(), its[0].Key)
			if err != nil || len(ats) != 1 || !ats[0].LeftUnstamped || ats[0].BodyStamped {
				t.Fatalf("attempts %+v, %v; want one, marked as having left unstamped", ats, err)
			}
			again := tc.send(e, 2)
			t.Logf("the same request again: %d %.200s", again.Status, again.Body)
			if n := e.journal().effectsOn(tc.subject); n != 1 {
				t.Fatalf("the rail holds %d effects on %s after the same request again, want 1: money moved twice", n, tc.subject)
			}
		})
	}
}

func do(t *testing.T, req *http.Request) agentResponse {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("agent request: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return agentResponse{Status: resp.StatusCode, Body: string(b), Header: resp.Header}
}

// TestBodilessFullRefundLeavesStamped: a Razorpay full refund sent with no
// body at all (its headers end the stream) leaves, through the Envoy
// stand-in, with a body ext_proc writes at the request headers: the stamp
// and the amount the refund was valued and held at. The rail applies it
// and answers 500; the reconciler's listing finds it by its stamp, so it
// ends APPLIED (before, it left unstamped and ended QUARANTINED), for the
// amount held, and the same request again moves no more money.
func TestBodilessFullRefundLeavesStamped(t *testing.T) {
	e := newRailEnv(t, envOptions{serveEnv: []string{"COUNTERSIGN_RECONCILE_MAX_ATTEMPTS=2"}})
	e.payment("razorpay", "pay_nobody", 50000, "INR")
	e.fault(map[string]any{"profile": "5xx_after_apply", "count": 1, "method": "POST"})
	send := func() agentResponse {
		req, err := http.NewRequest(http.MethodPost, e.proxy+"/v1/payments/pay_nobody/refund", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "razorpay.local"
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("rzp_agent:"+e.secret)))
		return do(t, req)
	}
	first := send()
	t.Logf("agent saw %d %.200s", first.Status, first.Body)
	j := e.journal()
	if n := j.effectsOn("pay_nobody"); n != 1 {
		t.Fatalf("the rail holds %d effects on pay_nobody, want the one it applied", n)
	}
	its := e.settle("pay_nobody", 60*time.Second)
	if len(its) != 1 || its[0].State != intent.Applied {
		t.Fatalf("intents on pay_nobody: %+v; want one, APPLIED (found by its stamp)", its)
	}
	_, ats, err := e.store.GetIntent(context.Background(), its[0].Key)
	if err != nil || len(ats) != 1 || !ats[0].BodyStamped || ats[0].LeftUnstamped {
		t.Fatalf("attempts %+v, %v; want one, marked as having left stamped", ats, err)
	}
	for _, eff := range j.Effects {
		if eff.Subject == "pay_nobody" && (eff.Amount != its[0].AmountMinor || eff.Metadata["countersign_sik"] == "") {
			t.Fatalf("the rail refunded %d with notes %v; want the %d held, stamped", eff.Amount, eff.Metadata, its[0].AmountMinor)
		}
	}
	again := send()
	t.Logf("the same request again: %d %.200s", again.Status, again.Body)
	if n := e.journal().effectsOn("pay_nobody"); n != 1 {
		t.Fatalf("the rail holds %d effects on pay_nobody after the same request again, want 1", n)
	}
}
