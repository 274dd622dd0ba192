package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

// fakeMCP is a payment MCP server in the shape of Stripe's agent toolkit
// (create_refund with payment_intent, amount, reason, metadata), speaking
// streamable HTTP's JSON answer form, that calls the mock rail's REST API
// with the credential and idempotency key it was given.
type fakeMCP struct {
	rail  atomic.Value // the mock rail's base URL
	calls atomic.Int32
	// dropKey: the server sends its own requests without the caller's
	// idempotency key (as Stripe's toolkit does).
	dropKey bool
}

func (f *fakeMCP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string `json:"name"`
			Arguments struct {
				PaymentIntent string            `json:"payment_intent"`
				Amount        *int64            `json:"amount"`
				Metadata      map[string]string `json:"metadata"`
			} `json:"arguments"`
		} `json:"params"`
	}
	if r.Method != http.MethodPost || r.URL.Path != "/mcp" || json.NewDecoder(r.Body).Decode(&req) != nil ||
		req.Method != "tools/call" || req.Params.Name != "create_refund" {
		http.Error(w, "fake MCP server: unsupported", http.StatusBadRequest)
		return
	}
	f.calls.Add(1)
	form := url.Values{"payment_intent": {req.Params.Arguments.PaymentIntent}}
	if a := req.Params.Arguments.Amount; a != nil {
		form.Set("amount", fmt.Sprint(*a))
	}
	for k, v := range req.Params.Arguments.Metadata {
		form.Set("metadata["+k+"]", v)
	}
	rr, _ := http.NewRequest(http.MethodPost, f.rail.Load().(string)+"/v1/refunds", strings.NewReader(form.Encode()))
	rr.Header.Set("Authorization", r.Header.Get("Authorization"))
	rr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if k := r.Header.Get("Idempotency-Key"); k != "" && !f.dropKey {
		rr.Header.Set("Idempotency-Key", k)
	}
	resp, err := http.DefaultClient.Do(rr)
	var text string
	isError := true
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text, isError = string(b), resp.StatusCode != 200
	} else {
		text = "Failed to create refund"
	}
	result, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}, "isError": isError})
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, result)
}

// TestMCPToolCallsAreGuarded: an agent's MCP client calls create_refund on a
// payment MCP server through Envoy; Countersign applies the same gates and
// ledger, stamps the tool's metadata argument, and commits the answer.
// A refund above the refundable balance is refused as a JSON-RPC error for
// the call's own id, and never reaches the server.
func TestMCPToolCallsAreGuarded(t *testing.T) {
	f := &fakeMCP{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	e := newRailEnv(t, envOptions{mcpUpstream: srv.URL})
	f.rail.Store(e.mock)
	e.payment("stripe", "pi_mcp", 10000, "usd")

	call := func(id int, amount int64) agentResponse {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"create_refund","arguments":{"payment_intent":"pi_mcp","amount":%d}}}`, id, amount)
		req, _ := http.NewRequest(http.MethodPost, e.proxy+"/mcp", strings.NewReader(body))
		req.Host = "mcp.local"
		req.Header.Set("Authorization", "Bearer "+e.secret)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return agentResponse{Status: resp.StatusCode, Body: string(b), Header: resp.Header}
	}

	r := call(1, 2500)
	if r.Status != 200 || !strings.Contains(r.Body, `"id":1`) || strings.Contains(r.Body, `"isError":true`) {
		t.Fatalf("allowed tool call: %d %s", r.Status, r.Body)
	}
	its := e.settle("pi_mcp", 10*time.Second)
	j := e.journal()
	if len(its) != 1 || its[0].State != intent.Applied || j.effectsOn("pi_mcp") != 1 {
		t.Fatalf("ledger %+v, journal %+v", its, j.Effects)
	}
	if stamp := j.Effects[0].Metadata["countersign_sik"]; stamp == "" || !strings.HasPrefix(stamp, its[0].SIK) {
		t.Fatalf("the tool call was not stamped through its metadata argument: %v", j.Effects[0].Metadata)
	}
	// The same call again (a new JSON-RPC id) is answered from the ledger,
	// re-addressed to the new id, without reaching the MCP server.
	r = call(2, 2500)
	if r.Status != 200 || !strings.Contains(r.Body, `"id":2`) || f.calls.Load() != 1 {
		t.Fatalf("duplicate tool call: %d %s (server calls %d)", r.Status, r.Body, f.calls.Load())
	}
	// Above the refundable balance: a JSON-RPC error for id 3, not a call.
	r = call(3, 9000)
	var rpc struct {
		ID    int `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.Body), &rpc); err != nil || rpc.ID != 3 || rpc.Error.Code == 0 ||
		!strings.Contains(rpc.Error.Message, "75.00 USD still refundable") || f.calls.Load() != 1 {
		t.Fatalf("refused tool call: %d %s (server calls %d)", r.Status, r.Body, f.calls.Load())
	}
}
