package mcp

import (
	"encoding/json"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
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
