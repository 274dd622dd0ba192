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
// without the body stamp, because its headers end the stream (a Razorpay
// full refund sent with no body) or because its tool has no place for the
// stamp (an MCP create_refund without a metadata argument, whose server
// drops the idempotency key, as Stripe's toolkit does), is applied by the
// rail, which answers 500. No listing can show such a request, so the
// reconciler must not settle it CONFIRMED_NOT_APPLIED (which voids its
// hold and lets the same request through again): it ends QUARANTINED for
// a person, its attempt marked as having left unstamped, and the same
// request sent again moves no more money. Before, both paid twice.
func TestUnstampedRequestIsNeverProvenAbsent(t *testing.T) {
	cases := []struct {
		name    string
		subject string
		send    func(e *railEnv, id int) agentResponse
	}{
		{"razorpay full refund without a body", "pay_nobody", func(e *railEnv, _ int) agentResponse {
			req, err := http.NewRequest(http.MethodPost, e.proxy+"/v1/payments/pay_nobody/refund", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "razorpay.local"
			req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("rzp_agent:"+e.secret)))
			return do(t, req)
		}},
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
