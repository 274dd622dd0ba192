package mcp

import (
	"encoding/json"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
)

// FuzzParse: Parse never panics; an error is ErrUnrecognised or
// ErrMalformed; an action has a clean non-empty subject and a non-negative
// amount (railtest.CheckParsed); an accepted action is valid JSON; and a
// parsed action survives the body stamp unchanged.
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
	adapters := []rail.Adapter{mustNew(f, StripeDefaults())(), mustNew(f, stripeWithMetadata())(), mustNew(f, RazorpayDefaults())()}
	f.Fuzz(func(t *testing.T, method, path, contentType string, body []byte) {
		req := rail.Request{Method: method, Path: path, Body: body, Headers: map[string]string{"content-type": contentType}}
		for _, ad := range adapters {
			p, err := ad.Parse(req)
			if cerr := railtest.CheckParsed(p, err); cerr != nil {
				t.Fatalf("Parse(%q %q %q) = %+v, %v: %v", method, path, body, p, err, cerr)
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
