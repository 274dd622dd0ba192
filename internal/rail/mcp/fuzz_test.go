package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
	"github.com/countersign/countersign/internal/sik"
)

// FuzzParse: Parse never panics; an error is ErrUnrecognised or
// ErrMalformed; an action has a clean non-empty subject and a non-negative
// amount (railtest.CheckParsed); an accepted action is valid JSON; a
// parsed action survives the body stamp unchanged; and no accepted message
// names an id of the shape Countersign gives money-moving calls.
func FuzzParse(f *testing.F) {
	add := func(r rail.Request) { f.Add(r.Method, r.Path, r.Headers["content-type"], r.Body) }
	for _, tc := range stripeActions {
		add(tc.Req)
	}
	for _, tc := range stripeReads {
		add(tc.Req)
	}
	for _, tc := range stripeMalformed {
		add(tc.Req)
	}
	for _, r := range stripeMalformedAmounts {
		add(r)
	}
	for _, tc := range stripeUnrecognised {
		add(tc.Req)
	}
	for _, tc := range razorpayFixtures().Actions {
		add(tc.Req)
	}
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":"countersign-` + stampA + `#1","method":"ping"}`,
		`{"jsonrpc":"2.0","id":"\u0043ountersign-x","result":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"countersign-x"}}`,
		// Answers to a server's requests (checkClientResult, checkClientError).
		`{"jsonrpc":"2.0","id":"srv-1","result":{"action":"decline","content":{}}}`,
		`{"jsonrpc":"2.0","id":"srv-1","result":{"action":"accept","content":{"destination":"ba_1","amount":5}}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"roots":[{"uri":"file:///x","name":"x"}]}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"role":"assistant","content":{"type":"text","text":"ba_1"},"model":"m"}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"_meta":{}}}`,
		`{"jsonrpc":"2.0","id":2,"error":{"code":-1,"message":"no","data":{}}}`,
		`{"jsonrpc":"2.0","id":"1","result":{"action":"decline","content":{}}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"MCP error -32601: Method not found"}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"4111 1111 1111 1111"}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":4111111111111111,"message":"no"}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":411111,"message":"1111111"}}`,
		`{"jsonrpc":"2.0","id":4,"result":{"roots":[{"uri":"file:///a/411111","name":"111111"},{"uri":"file:///b"}]}}`,
		`{"jsonrpc":"2.0","id":1234567890,"result":{}}`,
		// A case variant of the stamp key, which the stamp would sit beside.
		callBody("1", "create_refund", `{"payment_intent":"pi_1","amount":1500,"metadata":{"COUNTERSIGN_SIK":"x"}}`),
		callBody("1", "create_refund", `{"payment_intent":"pi_1","amount":1500,"metadata":{"countersign_\u017fik":"x"}}`),
	} {
		f.Add("POST", DefaultEndpoint, "application/json", []byte(body))
	}
	adapters := []rail.Adapter{mustNew(f, StripeDefaults())(), mustNew(f, stripeWithMetadata())(), mustNew(f, RazorpayDefaults())()}
	f.Fuzz(func(t *testing.T, method, path, contentType string, body []byte) {
		req := rail.Request{Method: method, Path: path, Body: body, Headers: map[string]string{"content-type": contentType}}
		for _, ad := range adapters {
			p, err := ad.Parse(req)
			if cerr := railtest.CheckParsed(p, err); cerr != nil {
				t.Fatalf("Parse(%q %q %q) = %+v, %v: %v", method, path, body, p, err, cerr)
			}
			// No accepted message names an id of Countersign's own: the
			// answer to a money-moving call is bound to it by that id.
			if msg, ok := asObject(body); err == nil && ok {
				params, _ := asObject(msg["params"])
				for k, v := range params {
					if strings.EqualFold(k, "requestId") && reservedID(v) {
						t.Fatalf("accepted %q, which cancels an id of Countersign's", body)
					}
				}
				if reservedID(msg["id"]) {
					t.Fatalf("accepted %q, which names an id of Countersign's", body)
				}
				// A tools/call's params hold only what Countersign reads:
				// a Go server reads "Arguments" as arguments.
				if m, _ := asString(msg["method"]); m == "tools/call" {
					for k := range params {
						if !slices.Contains(callKeys, k) {
							t.Fatalf("accepted %q, whose params.%s a server may read unchecked", body, k)
						}
					}
				}
			}
			// An accepted answer to a server request carries nothing a
			// money-moving tool could act on.
			if msg, ok := asObject(body); err == nil && ok && msg["method"] == nil {
				if why := carriesToolInput(msg); why != "" {
					t.Fatalf("accepted %q, whose %s", body, why)
				}
			}
			if err != nil || p.Kind != rail.KindAction {
				continue
			}
			// An accepted call is plain JSON, which the server reads the
			// same way (no space JSON does not skip around it).
			if !json.Valid(body) {
				t.Fatalf("accepted invalid JSON %q", body)
			}
			st, err := ad.Stamp(p.Action, stampA, 1)
			if err != nil {
				t.Fatalf("Stamp(%+v): %v", p.Action, err)
			}
			if st.BodyField == "" {
				continue
			}
			stamped := req
			if stamped.Body, err = WriteBodyStamp(body, st.BodyField, st.BodyValue); err != nil {
				t.Fatalf("WriteBodyStamp(%q): %v", body, err)
			}
			again, err := ad.Parse(stamped)
			if err != nil || !railtest.EqualAction(again.Action, p.Action) {
				t.Fatalf("stamped body %q parses as %+v, %v; want %+v", stamped.Body, again.Action, err, p.Action)
			}
		}
	})
}

// carriesToolInput says what an answer to a server request carries that a
// tool could act on, or "": the allowlist of parseResponse,
// checkClientResult and checkClientError, written again with
// encoding/json's generic decoding and regular expressions. Its bounds are
// written out, not the constants': 9 digits of id; 64 bytes of message or
// root name, 255 of root URI, 16 roots; printable ASCII; 12 digits in all.
func carriesToolInput(msg object) string {
	var id any
	if json.Unmarshal(msg["id"], &id) != nil {
		return "id is not JSON"
	}
	switch v := id.(type) {
	case string:
		if !answerDigits.MatchString(v) {
			return fmt.Sprintf("id is the string %.20q", v)
		}
	case float64:
		if !answerInteger.Match(bytes.TrimSpace(msg["id"])) {
			return fmt.Sprintf("id is the number %.20s", msg["id"])
		}
	default:
		return fmt.Sprintf("id is %T", id)
	}
	digits := 0
	short := func(what string, v any, limit int) string {
		s, ok := v.(string)
		if !ok || len(s) > limit || !answerPrintable.MatchString(s) {
			return fmt.Sprintf("%s is not %d bytes or fewer of printable ASCII: %.40q", what, limit, v)
		}
		if digits += len(answerDigit.FindAllString(s, -1)); digits > 12 {
			return "answer's text carries more than 12 digits"
		}
		return ""
	}
	if raw, ok := msg["error"]; ok {
		var e map[string]any
		if json.Unmarshal(raw, &e) != nil || e == nil {
			return "error is not an object"
		}
		for k := range e {
			if k != "code" && k != "message" {
				return "error carries " + k
			}
		}
		var raws map[string]json.RawMessage
		if json.Unmarshal(raw, &raws) != nil {
			return "error is not an object"
		}
		code := strings.TrimPrefix(strings.TrimSpace(string(raws["code"])), "-")
		if len(code) > 6 {
			return fmt.Sprintf("error's code has more than 6 digits: %.30s", code)
		}
		digits += len(answerDigit.FindAllString(code, -1))
		return short("error's message", e["message"], 64)
	}
	var r map[string]any
	if json.Unmarshal(msg["result"], &r) != nil || r == nil {
		return "result is not an object"
	}
	if roots, ok := r["roots"]; ok && len(r) == 1 {
		list, ok := roots.([]any)
		if !ok || len(list) > 16 {
			return "roots are not a list of at most 16"
		}
		for _, x := range list {
			root, _ := x.(map[string]any)
			uri, _ := root["uri"].(string)
			if !strings.HasPrefix(strings.ToLower(uri), "file://") {
				return "root is not a file URI"
			}
			for k, v := range root {
				if _, isString := v.(string); !isString || k != "uri" && k != "name" {
					return "root carries " + k
				}
			}
			if why := short("root's uri", root["uri"], 255); why != "" {
				return why
			}
			if name, ok := root["name"]; ok {
				if why := short("root's name", name, 64); why != "" {
					return why
				}
			}
		}
		return ""
	}
	for k, v := range r {
		switch {
		case k == "action" && (v == "decline" || v == "cancel"):
		case k == "content" && r["action"] != nil:
			if c, ok := v.(map[string]any); !ok || len(c) > 0 {
				return "elicitation carries content"
			}
		default:
			return fmt.Sprintf("result carries %s (%v)", k, v)
		}
	}
	return ""
}

// The shapes carriesToolInput allows an answer's id and text.
var (
	answerDigits    = regexp.MustCompile(`^[0-9]{1,9}$`)
	answerInteger   = regexp.MustCompile(`^-?(0|[1-9][0-9]{0,8})$`)
	answerPrintable = regexp.MustCompile(`^[ -~]*$`)
	answerDigit     = regexp.MustCompile(`[0-9]`)
)

// FuzzToolPins: a server's tools/list entry is untrusted input. EntryHash
// never panics; an entry it hashes hashes alike however it is re-spaced,
// and its hash is of its canonical form; ListHash agrees with the
// canonical form of the one-entry array; and DescribeTool, fed the entry
// as a listed tool beside another, never panics and, when it answers,
// agrees with EntryHash and ListHash.
func FuzzToolPins(f *testing.F) {
	for _, s := range []string{
		tool("create_refund", honestDesc),
		`{"name":"create_refund","inputSchema":{"type":"object","properties":{"amount":{"type":"integer","maximum":1.0E2,"description":"Minor units."}}},"_meta":{"x":[1,-0,0.000001,1e21]}}`,
		`{"name":"create_refund","description":"\u00e9\ud83d\ude00","title":null}`,
		`{"name":"create_refund","n":1e400}`,
		`{"name":"create_refund","a":1,"a":2}`,
		`{"name":"create_refund","a":"\ud800"}`,
		`["create_refund"]`,
	} {
		f.Add([]byte(s))
	}
	ad := mustNew(f, StripeDefaults())().(rail.ToolDescriber)
	const other = `{"name":"list_refunds","description":"List."}`
	f.Fuzz(func(t *testing.T, entry []byte) {
		h, err := EntryHash(entry)
		if err == nil {
			var spaced bytes.Buffer
			if json.Indent(&spaced, entry, " ", "\t") == nil {
				if h2, err := EntryHash(spaced.Bytes()); err != nil || h2 != h {
					t.Fatalf("EntryHash(%q) = %s, but re-spaced = %s, %v", entry, h, h2, err)
				}
			}
			c, cerr := sik.Canonicalize(entry)
			if cerr != nil || hashHex(c) != h {
				t.Fatalf("EntryHash(%q) = %s, not the hash of its canonical form (%v)", entry, h, cerr)
			}
			if l, err := ListHash([]json.RawMessage{entry}); err != nil || l != hashHex([]byte("["+string(c)+"]")) {
				t.Fatalf("ListHash([%q]) = %s, %v", entry, l, err)
			}
		}
		if !json.Valid(entry) {
			return
		}
		c := clientFunc(func(_ context.Context, _, _ string, _ map[string]string, body []byte) (*http.Response, error) {
			return answer(http.StatusOK, "application/json", `{"jsonrpc":"2.0","id":"countersign-tools-list-0","result":{"tools":[`+string(entry)+`,`+other+`]}}`), nil
		})
		name := "create_refund"
		got, derr := ad.DescribeTool(context.Background(), c, name)
		if derr != nil {
			return
		}
		if got.Entry != h {
			t.Fatalf("DescribeTool(%q).Entry = %s, EntryHash = %s", entry, got.Entry, h)
		}
		want, lerr := ListHash([]json.RawMessage{entry, json.RawMessage(other)})
		if (lerr == nil) != (got.List != "") || (lerr == nil && got.List != want) {
			t.Fatalf("DescribeTool(%q).List = %q, ListHash = %q, %v", entry, got.List, want, lerr)
		}
	})
}
