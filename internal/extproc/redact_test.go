package extproc

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/countersign/countersign/internal/secrets"
)

// TestReadAnswerOfAnotherMediaType: an identity-encoded answer to a read
// that is neither JSON nor an event stream reaches the agent with its
// status: as it came when its bytes hold no client secret (an MCP
// server's text/plain 404 ending a session, which the client must see to
// start another: found by a review, it was replaced by a 502), with each
// secret secrets.Redacted and content-length its own when they do. An encoded
// answer is still withheld, keeping an error status.
func TestReadAnswerOfAnotherMediaType(t *testing.T) {
	for _, tc := range []struct{ name, status, ct, body, want string }{
		{"mcp-go's expired session", "404", "text/plain; charset=utf-8", "Session terminated\n", ""},
		{"mcp-go's unknown session", "404", "text/plain; charset=utf-8", "Invalid session ID\n", ""},
		{"a page naming client_secret", "200", "text/html", "<p>Pass the client_secret to confirmCardPayment.</p>", ""},
		{"a page holding a secret", "200", "text/html", `<a href="/3ds?payment_intent_client_secret=pi_1_secret_abc&k=pk_1">go</a>`,
			`<a href="/3ds?payment_intent_client_secret=[removed by Countersign]&k=pk_1">go</a>`},
		{"escaped and percent-encoded secrets", "400", "text/plain", `bad: pi_1\u005fsecret\u005fabc, seti_2%5Fsecret%5Fdef; src_client_secret_ghi`,
			`bad: [removed by Countersign], [removed by Countersign]; [removed by Countersign]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send := readExchange(t)
			send(requestHeaders("POST", "/mcp", "mcp-session-id", "s1"))
			r := send(responseHeaders(":status", tc.status, "content-type", tc.ct, "content-length", strconv.Itoa(len(tc.body))))
			if r.GetResponseHeaders() == nil || r.GetResponseHeaders().GetResponse() != nil {
				t.Fatalf("response headers answer = %v, want them unchanged", r)
			}
			r = send(responseBody(tc.body))
			if r.GetResponseBody() == nil {
				t.Fatalf("body answer = %v, want the answer to go", r)
			}
			mut := r.GetResponseBody().GetResponse()
			if tc.want == "" {
				if mut != nil {
					t.Fatalf("an answer without secrets was changed: %v", mut)
				}
				return
			}
			got := string(mut.GetBodyMutation().GetBody())
			if got != tc.want {
				t.Fatalf("the agent receives %q\nwant %q", got, tc.want)
			}
			if v, ok := setHeaderOf(mut.GetHeaderMutation(), "content-length"); !ok || v != strconv.Itoa(len(got)) {
				t.Fatalf("content-length = %q (set %v), want %d", v, ok, len(got))
			}
		})
	}

	for _, tc := range []struct {
		status string
		want   uint32
	}{{"404", 404}, {"503", 503}, {"200", 502}} {
		t.Run("encoded "+tc.status+": withheld as "+strconv.Itoa(int(tc.want)), func(t *testing.T) {
			send := readExchange(t)
			send(requestHeaders("POST", "/mcp"))
			r := send(responseHeaders(":status", tc.status, "content-type", "text/plain", "content-encoding", "gzip"))
			im := r.GetImmediateResponse()
			if im == nil || uint32(im.GetStatus().GetCode()) != tc.want {
				t.Fatalf("answer = %v, want HTTP %d in its place", r, tc.want)
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(im.GetBody(), &e); err != nil || e.Error.Code != "countersign_read_withheld" || !strings.Contains(e.Error.Message, "encoded (gzip)") {
				t.Fatalf("refusal body = %s (%v)", im.GetBody(), err)
			}
		})
	}
}

// moneyCallHeaders sends the request phases of the REST money call
// exchangeWith's intent allows, then the response headers.
func moneyCallHeaders(send func(*extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse, ct string) {
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headers(":method", "POST", ":path", "/v1/refunds", "content-type", "application/x-www-form-urlencoded")}}})
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(decidedBody), EndOfStream: true}}})
	send(responseHeaders(":status", "200", "content-type", ct))
}

// TestMoneyCallAnswerBeforeTrailersLosesItsSecrets: in BUFFERED mode an
// answer followed by trailers comes whole with end_of_stream false
// (ext_proc.cc onTrailers); the agent's copy loses its secrets all the
// same (found by a review: it went as it came), and nothing is committed
// at that phase (as before).
func TestMoneyCallAnswerBeforeTrailersLosesItsSecrets(t *testing.T) {
	t.Run("REST", func(t *testing.T) {
		rec := &recorder{done: make(chan struct{}, 4)}
		_, send := exchangeWith(t, rec)
		moneyCallHeaders(send, "application/json")
		answer := `{"id":"re_1","object":"refund","payment_intent":{"id":"pi_1","client_secret":"pi_1_secret_abc"}}`
		r := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: []byte(answer), EndOfStream: false}}})
		if got := agentReceives(r, answer); got != `{"id":"re_1","object":"refund","payment_intent":{"id":"pi_1"}}` {
			t.Fatalf("the agent receives %s", got)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.commits) != 0 {
			t.Fatalf("committed at a body phase that does not end the stream: %+v", rec.commits)
		}
	})
	t.Run("MCP", func(t *testing.T) {
		ref := mcpRef("")
		rec := &recorder{done: make(chan struct{}, 4)}
		_, send := mcpExchange(t, rec, ref)
		send(responseHeaders(":status", "200", "content-type", "application/json"))
		answer := `{"jsonrpc":"2.0","id":"` + ref.CallID + `","result":{"content":[{"type":"text","text":"{\"client_secret\":\"pi_1_secret_abc\"}"}]}}`
		r := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: []byte(answer), EndOfStream: false}}})
		if r.GetImmediateResponse() != nil {
			t.Fatalf("the call's own answer was replaced: %v", r)
		}
		if got := agentReceives(r, answer); strings.Contains(got, "pi_1_secret_abc") || !strings.Contains(got, `"text":"{}"`) {
			t.Fatalf("the agent receives %s", got)
		}
	})
}

// TestMoneyCallAnswerTheScrubberCannotReadIsRedacted: a money call's
// answer secrets.ScrubJSON or secrets.ScrubEventStream refuses still reaches the agent
// (its outcome is the agent's to read) but with its raw bytes' secrets
// secrets.Redacted (found by a review: it went as it came); the ledger commits it
// as it came.
func TestMoneyCallAnswerTheScrubberCannotReadIsRedacted(t *testing.T) {
	t.Run("REST JSON behind a byte order mark", func(t *testing.T) {
		rec := &recorder{done: make(chan struct{}, 4)}
		_, send := exchangeWith(t, rec)
		moneyCallHeaders(send, "application/json")
		answer := "\ufeff" + `{"id":"re_1","payment_intent":{"id":"pi_1","client_secret":"pi_1_secret_abc"}}`
		r := send(responseBody(answer))
		<-rec.done
		if got := agentReceives(r, answer); got != "\ufeff"+`{"id":"re_1","payment_intent":{"id":"pi_1","client_secret":"[removed by Countersign]"}}` {
			t.Fatalf("the agent receives %q", got)
		}
		if got := string(rec.commits[0].resp.Body); got != answer {
			t.Fatalf("committed %q, want the rail's answer as it came", got)
		}
	})
	t.Run("MCP event stream with an event that is not JSON", func(t *testing.T) {
		ref := mcpRef("")
		rec := &recorder{done: make(chan struct{}, 4)}
		_, send := mcpExchange(t, rec, ref)
		send(responseHeaders(":status", "200", "content-type", "text/event-stream"))
		answer := "event: keepalive\ndata: ok\n\n" +
			"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"" + ref.CallID + "\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"{\\\"client_secret\\\":\\\"pi_1_secret_abc\\\"}\"}]}}\n\n"
		r := send(responseBody(answer))
		<-rec.done
		got := agentReceives(r, answer)
		if strings.Contains(got, "pi_1_secret_abc") || !strings.Contains(got, secrets.Redacted) || !strings.Contains(got, "data: ok\n") {
			t.Fatalf("the agent receives %q", got)
		}
		if string(rec.commits[0].resp.Body) != answer {
			t.Fatalf("committed %q, want the rail's answer as it came", rec.commits[0].resp.Body)
		}
	})
}

// TestLocalReplyIsScrubbedAsARead: ext_authz's denial carrying a replayed
// stored answer is a local reply, which reaches ext_proc as response
// phases with no request phase (Envoy encodes it from the first encoder
// filter); its answer loses its secrets as a read's does (found by a
// review: it went as it was stored).
func TestLocalReplyIsScrubbedAsARead(t *testing.T) {
	send := readExchange(t)
	answer := `{"id":"re_1","object":"refund","payment_intent":{"id":"pi_1","client_secret":"pi_1_secret_abc"}}`
	if r := send(responseHeaders(":status", "200", "content-type", "application/json", "x-countersign-replay", "true")); r.GetImmediateResponse() != nil {
		t.Fatalf("response headers answer = %v", r)
	}
	r := send(responseBody(answer))
	if got := agentReceives(r, answer); got != `{"id":"re_1","object":"refund","payment_intent":{"id":"pi_1"}}` {
		t.Fatalf("the agent receives %s", got)
	}

	// A local reply of Envoy's own (text/plain) goes as it came.
	send = readExchange(t)
	send(responseHeaders(":status", "503", "content-type", "text/plain"))
	if r := send(responseBody("upstream connect error")); r.GetResponseBody() == nil || r.GetResponseBody().GetResponse() != nil {
		t.Fatalf("answer = %v, want it unchanged", r)
	}
}
