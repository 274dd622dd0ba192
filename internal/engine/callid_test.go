package engine

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/mcp"
)

// rpcAnswer is a JSON-RPC error for the request id id (JSON text).
func rpcAnswer(id string, code int, message string) rail.Response {
	return rail.Response{Status: http.StatusOK, Headers: map[string]string{"content-type": "application/json"},
		Body: []byte(`{"jsonrpc":"2.0","id":` + id + `,"error":{"code":` + strconv.Itoa(code) + `,"message":"` + message + `"}}`)}
}

// TestCrossedMCPAnswerPaysOnce: the agent sends a slow read under id 7,
// then the refund under id 7 on the same session; a server routing
// answers by id within a session (the MCP SDKs' streamable HTTP
// transports do) would hand the refund's stream the read's answer, a
// -32601, while the refund runs at the rail. The refund left under
// Countersign's own id, so that answer names another: it proves nothing,
// the intent is not FAILED_TERMINAL (which would reopen it under a new
// idempotency key), and the identical request is not sent again; the rail
// holds one refund. An answer naming the call's id still counts, a
// refusal as a refusal and an entity as applied.
func TestCrossedMCPAnswerPaysOnce(t *testing.T) {
	r := newMCPRig(t, nil)
	ctx := context.Background()
	out := r.e.Decide(ctx, r.call(7, "create_refund", 700))
	if out.Verdict != Allow || out.Intent == nil {
		t.Fatalf("decide = %s %s %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	if want := mcp.CallIDPrefix + out.Intent.BodyValue + "#1"; out.Intent.CallID != want {
		t.Fatalf("the call leaves under id %q, want %q", out.Intent.CallID, want)
	}
	ref, err := r.e.MarkSent(ctx, *out.Intent, true)
	if err != nil {
		t.Fatal(err)
	}
	r.createAsServer(t, 700, out.Intent.BodyValue) // the tool ran; the read's answer came back instead
	for _, crossed := range []rail.Response{rpcAnswer("7", -32601, "Method not found"), rpcAnswer("null", -32700, "Parse error")} {
		it, c, err := r.e.Commit(ctx, ref, crossed)
		if err != nil {
			t.Fatal(err)
		}
		if it.State == intent.FailedTerminal || c.Outcome != rail.Ambiguous {
			t.Fatalf("another request's answer %s settled the intent %s (%s: %s); want it left to reconciliation", crossed.Body, it.State, c.Outcome, c.Reason)
		}
	}
	again := r.e.Decide(ctx, r.call(8, "create_refund", 700))
	if again.Verdict == Allow || again.ReasonCode != ReasonReconciling {
		t.Fatalf("the same refund again = %s %s (%v); want it answered as being reconciled", again.Verdict, again.ReasonCode, again.Intent)
	}
	refunds := 0
	for _, e := range r.mock.Journal().Effects {
		if e.Kind == "refund" {
			refunds++
		}
	}
	if refunds != 1 {
		t.Fatalf("the rail holds %d refunds for one intent", refunds)
	}

	// Bound to the call, a refusal is a refusal...
	out = r.e.Decide(ctx, r.call(9, "create_refund", 300))
	if out.Verdict != Allow {
		t.Fatalf("decide = %s %s %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	ref, err = r.e.MarkSent(ctx, *out.Intent, true)
	if err != nil {
		t.Fatal(err)
	}
	if it, _, err := r.e.Commit(ctx, ref, rpcAnswer(strconv.Quote(ref.CallID), -32601, "Method not found")); err != nil || it.State != intent.FailedTerminal {
		t.Fatalf("the call's own -32601 = %s, %v; want FAILED_TERMINAL", it.State, err)
	}
	// ...and an entity is applied.
	out = r.e.Decide(ctx, r.call(10, "create_refund", 200))
	if out.Verdict != Allow {
		t.Fatalf("decide = %s %s %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	ref, err = r.e.MarkSent(ctx, *out.Intent, true)
	if err != nil {
		t.Fatal(err)
	}
	entity := r.createAsServer(t, 200, out.Intent.BodyValue)
	answer := rail.Response{Status: http.StatusOK, Headers: map[string]string{"content-type": "application/json"},
		Body: []byte(`{"jsonrpc":"2.0","id":` + strconv.Quote(ref.CallID) + `,"result":{"content":[{"type":"text","text":` + strconv.Quote(string(entity)) + `}]}}`)}
	if it, c, err := r.e.Commit(ctx, ref, answer); err != nil || it.State != intent.Applied {
		t.Fatalf("the call's own answer = %s (%s), %v; want APPLIED", it.State, c.Reason, err)
	}
}
