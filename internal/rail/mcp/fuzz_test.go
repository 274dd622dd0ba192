package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
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
				if reservedID(msg["id"]) || reservedID(params["requestId"]) {
					t.Fatalf("accepted %q, which names an id of Countersign's", body)
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
