package extproc

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/extauthz"
)

// An MCP read-only tools/call as the agent sends it, and the answer of
// Stripe's agent toolkit to list_payment_intents: the PaymentIntents
// JSON.stringify'd whole into a text item.
const (
	mcpReadCall = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"list_payment_intents","arguments":{"limit":100}}}`
	piListText  = `[{"id":"pi_1","object":"payment_intent","amount":2500,"client_secret":"pi_1_secret_abc","status":"requires_payment_method"}]`
)

var mcpListAnswer = `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":` + strconv.Quote(piListText) + `},{"type":"text","text":"kept"}]}}`

// piListScrubbed is piListText as the agent receives it inside a text
// item: JSON in a string is scrubbed as JSON (the client_secret member
// goes), the rest of the string kept (found by a review: the whole item
// was emptied).
const piListScrubbed = `[{"id":"pi_1","object":"payment_intent","amount":2500,"status":"requires_payment_method"}]`

// mcpListScrubbed is mcpListAnswer as the agent receives it: the secret in
// the text item removed, everything else as it came.
var mcpListScrubbed = `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":` + strconv.Quote(piListScrubbed) + `},{"type":"text","text":"kept"}]}}`

// exchangeMCP drives one MCP exchange ext_authz allowed with no intent
// (check, if any, in its metadata) through ext_proc: the request (method,
// and reqBody unless empty), the response headers (status 200, the
// content type ct and a content-length) and body; it returns the answers
// to the request headers, the response headers, and the response body (nil
// when the headers' answer replaced the response).
func exchangeMCP(t *testing.T, check *engine.ToolsListCheck, method, reqBody, ct, body string) (reqH, respH, respB *extprocv3.ProcessingResponse) {
	t.Helper()
	var send func(*extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse
	if check != nil {
		send = checkedExchange(t, check)
	} else {
		send = readExchange(t)
	}
	reqH = send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headers(":method", method, ":path", "/mcp", "content-type", "application/json", "accept", "application/json, text/event-stream"), EndOfStream: reqBody == ""}}})
	if reqBody != "" {
		send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(reqBody), EndOfStream: true}}})
	}
	respH = send(responseHeaders(":status", "200", "content-type", ct, "content-length", strconv.Itoa(len(body))))
	if respH.GetImmediateResponse() != nil {
		return reqH, respH, nil
	}
	return reqH, respH, send(responseBody(body))
}

// checkedExchange is readExchange with check, an MCP answer check under
// pins, in ext_authz's metadata of every phase.
func checkedExchange(t *testing.T, check *engine.ToolsListCheck) func(*extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	t.Helper()
	st := openStream(t, &recorder{done: make(chan struct{}, 4)})
	meta := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{extauthz.MetadataNamespace: extauthz.ToolsListMetadata(nil, check)}}
	return func(r *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
		t.Helper()
		r.MetadataContext = meta
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

// agentReceives is the body the agent receives for a body phase's answer
// to a response of body sent.
func agentReceives(r *extprocv3.ProcessingResponse, sent string) string {
	if m := r.GetResponseBody().GetResponse().GetBodyMutation(); m != nil {
		return string(m.GetBody())
	}
	return sent
}

// TestMCPReadAnswerLosesItsClientSecrets: an MCP read is a POST (a
// read-only tools/call, found by a review: Stripe's list_payment_intents
// answer carries every PaymentIntent's client_secret inside a text item)
// or the server's GET event stream; either answer, JSON or an event
// stream, reaches the agent without any client secret, with a
// content-length of its own, and the rail is asked for it uncompressed.
// Under MCP pins the answer is judged against them first, then scrubbed.
func TestMCPReadAnswerLosesItsClientSecrets(t *testing.T) {
	for _, tc := range []struct {
		name, method, reqBody, ct, body, want string
		check                                 *engine.ToolsListCheck
	}{
		{name: "tools/call answered with JSON", method: "POST", reqBody: mcpReadCall, ct: "application/json", body: mcpListAnswer, want: mcpListScrubbed},
		{name: "tools/call answered with an event stream", method: "POST", reqBody: mcpReadCall, ct: "text/event-stream; charset=utf-8",
			body: "event: message\nid: ev-1\ndata: " + mcpListAnswer + "\n\n", want: "event: message\nid: ev-1\ndata: " + mcpListScrubbed + "\n\n"},
		{name: "an event stream with CRLF lines, a comment, a priming event and data over two lines", method: "POST", reqBody: mcpReadCall, ct: "text/event-stream",
			body: ": keep-alive\r\nid: p\r\ndata:\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\r\ndata: \"result\":{\"content\":[{\"type\":\"text\",\"text\":" + strconv.Quote(piListText) + "}]}}\r\n\r\n",
			want: ": keep-alive\r\nid: p\r\ndata:\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":" + strconv.Quote(piListScrubbed) + "}]}}\r\n\r\n"},
		{name: "the GET event stream replaying a tool's answer", method: "GET", ct: "text/event-stream",
			body: "id: s_1\ndata: \n\nevent: message\nid: s_2\ndata: " + mcpListAnswer + "\n\n", want: "id: s_1\ndata: \n\nevent: message\nid: s_2\ndata: " + mcpListScrubbed + "\n\n"},
		{name: "under MCP pins, an answer of its own", method: "POST", reqBody: mcpReadCall, ct: "application/json", body: mcpListAnswer, want: mcpListScrubbed,
			check: &engine.ToolsListCheck{RequestID: json.RawMessage("7"), Pins: entryPins(t), OwnAnswer: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqH, respH, respB := exchangeMCP(t, tc.check, tc.method, tc.reqBody, tc.ct, tc.body)
			if v, ok := setHeaderOf(reqH.GetRequestHeaders().GetResponse().GetHeaderMutation(), "accept-encoding"); !ok || v != "identity" {
				t.Fatalf("request headers answer = %v: want accept-encoding set to identity", reqH)
			}
			if respB == nil {
				t.Fatalf("the answer was replaced at its headers: %v", respH)
			}
			got := agentReceives(respB, tc.body)
			if strings.Contains(got, "_secret_") {
				t.Fatalf("the agent receives a client secret:\n%s", got)
			}
			if got != tc.want {
				t.Fatalf("the agent receives\n%q\nwant\n%q", got, tc.want)
			}
			if v, ok := setHeaderOf(respB.GetResponseBody().GetResponse().GetHeaderMutation(), "content-length"); !ok || v != strconv.Itoa(len(got)) {
				t.Fatalf("content-length = %q (set %v), want %d", v, ok, len(got))
			}
		})
	}

	for _, tc := range []struct{ name, method, reqBody, ct, body string }{
		{"initialize", "POST", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`, "application/json", `{"jsonrpc":"2.0","id":0,"result":{"serverInfo":{"name":"stripe"}}}`},
		{"the GET event stream, readable", "GET", "", "text/event-stream", ": ping\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n"},
		// A documentation search that explains client_secret holds none
		// (found by a review: its text was emptied).
		{"search_stripe_documentation", "POST", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search_stripe_documentation","arguments":{"question":"confirm on the client"}}}`,
			"application/json", `{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"Pass the PaymentIntent's client_secret (pi_..._secret_...) to stripe.confirmCardPayment."}]}}`},
	} {
		t.Run(tc.name+": without secrets, unchanged", func(t *testing.T) {
			_, respH, respB := exchangeMCP(t, nil, tc.method, tc.reqBody, tc.ct, tc.body)
			if respB == nil || respH.GetResponseHeaders().GetResponse() != nil {
				t.Fatalf("response headers answer = %v, want them unchanged (found by a review: the GET stream was withheld)", respH)
			}
			if respB.GetResponseBody() == nil || respB.GetResponseBody().GetResponse() != nil {
				t.Fatalf("answer = %v, want it unchanged", respB)
			}
		})
	}
}

// TestMCPReadAnswerWithheld: an MCP read's answer that cannot be read to
// remove its secrets is replaced by Countersign's 502, naming why and
// quoting nothing of it.
func TestMCPReadAnswerWithheld(t *testing.T) {
	for _, tc := range []struct{ name, ct, body, why string }{
		{"typed JSON, not JSON", "application/json", `not json at all`, "not JSON"},
		{"an event whose data is not JSON", "text/event-stream", "event: message\ndata: pi_1_secret_abc\n\n", "data that is not JSON"},
		{"an event whose data is cut", "text/event-stream", "data: {\"client_secret\":\"pi_1_secret_abc\"", "data that is not JSON"},
		{"a field no client reads", "text/event-stream", "data: {}\nsecret: pi_1_secret_abc\n\n", "a field other than data"},
		{"a secret in a comment", "text/event-stream", ": pi_1_secret_abc\ndata: {}\n\n", "outside an event's data"},
		{"a secret in an event id", "text/event-stream", "id: pi_1_secret_abc\ndata: {}\n\n", "outside an event's data"},
		{"not UTF-8", "text/event-stream", "data: {\"a\":\"\xff\"}\n\n", "not UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, respH, respB := exchangeMCP(t, nil, "POST", mcpReadCall, tc.ct, tc.body)
			r := respH
			if respB != nil {
				r = respB
			}
			im := r.GetImmediateResponse()
			if im == nil || im.GetStatus().GetCode() != 502 {
				t.Fatalf("answer = %v, want a 502 in its place", r)
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(im.GetBody(), &e); err != nil || e.Error.Code != "countersign_read_withheld" || !strings.Contains(e.Error.Message, tc.why) {
				t.Fatalf("refusal body = %s (%v): want a JSON error naming %q", im.GetBody(), err, tc.why)
			}
			if bytes.Contains(im.GetBody(), []byte("pi_1_secret")) {
				t.Fatalf("the refusal quotes the answer: %s", im.GetBody())
			}
		})
	}
}
