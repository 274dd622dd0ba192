package stripe

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

func gzipped(t testing.TB, b string) string {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write([]byte(b)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestClassifyReadsRefusalsOnlyFromStripesOwnError: a refusal is read from
// its body, never from its status alone. A body Countersign cannot read
// (compressed, a proxy's page, another shape, members twice) may stand
// for an idempotency_error, which must quarantine: read as a rejection,
// the next identical request would go out under a new key, a possible
// second payment. Every 4xx status × encoding × body is covered.
func TestClassifyReadsRefusalsOnlyFromStripesOwnError(t *testing.T) {
	own := stripeErr("invalid_request_error", "amount_too_large", "Refund amount is greater than unrefunded amount on charge")
	idem := stripeErr("idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters they were first used with.")
	type body struct {
		text string
		want func(status int) rail.Outcome // with no content coding
	}
	rejected := func(status int) rail.Outcome {
		if status == 409 {
			return rail.InProgress
		}
		return rail.Rejected
	}
	unread := func(status int) rail.Outcome {
		if status == 409 {
			return rail.InProgress // the same key is sent again: safe on the status alone
		}
		return rail.Ambiguous
	}
	bodies := map[string]body{
		"stripe_error":      {own, rejected},
		"idempotency_error": {idem, func(int) rail.Outcome { return rail.FingerprintMismatch }},
		"empty":             {"", unread},
		"html":              {"<html><body>400 Bad Request</body></html>", unread},
		"json_not_stripe":   {`{"message":"Bad Request","status":400}`, unread},
		"error_not_object":  {`{"error":"bad request"}`, unread},
		"error_no_type":     {`{"error":{"message":"Bad Request"}}`, unread},
		"truncated":         {own[:len(own)-3], unread},
		"two_objects":       {own + own, unread},
		"error_twice":       {`{"error":{"type":"invalid_request_error","message":"x"},"error":{"type":"idempotency_error","message":"y"}}`, unread},
		"type_case_variant": {`{"error":{"type":"invalid_request_error","TYPE":"idempotency_error","message":"x"}}`, unread},
		"error_upper_case":  {`{"ERROR":{"type":"invalid_request_error","message":"x"}}`, unread},
		"type_upper_case":   {`{"error":{"Type":"invalid_request_error","message":"x"}}`, unread},
		"lone_surrogate":    {`{"error":{"type":"invalid_request_error","message":"\ud800"}}`, unread},
	}
	encodings := map[string]bool{ // coding → encoded
		"":         false,
		"identity": false,
		"Identity": false,
		"gzip":     true,
		"GZIP":     true,
		"br":       true,
		"deflate":  true,
		"x-gzip":   true,
	}
	for _, status := range []int{400, 401, 402, 403, 404, 409, 429} {
		for bname, b := range bodies {
			for coding, encoded := range encodings {
				t.Run(fmt.Sprintf("%d/%s/coding=%s", status, bname, coding), func(t *testing.T) {
					r := rail.Response{Status: status, Headers: map[string]string{"content-type": "application/json"}, Body: []byte(b.text)}
					if coding != "" {
						r.Headers["content-encoding"] = coding
					}
					want := b.want(status)
					if encoded {
						want = rail.Ambiguous
						if coding == "gzip" || coding == "GZIP" {
							r.Body = []byte(gzipped(t, b.text))
						}
					}
					got := New().Classify(refundPI, r)
					if got.Outcome != want {
						t.Fatalf("Classify(%d, %q, %q) = %v (%q), want %v", status, coding, b.text, got.Outcome, got.Reason, want)
					}
					if got.Reason == "" {
						t.Error("no reason")
					}
				})
			}
		}
	}
}

// TestClassifyCreatedRefusesMembersReadTwoWays: encoding/json matches
// members to fields without regard to case and keeps the last of two, so
// a 2xx whose entity names a member twice (or in another case) reads one
// way here and another to the agent's SDK: never Applied.
func TestClassifyCreatedRefusesMembersReadTwoWays(t *testing.T) {
	good := refundJSON("re_1", "pi_1", "ch_1", 1500, "usd", stampA)
	for _, tc := range []struct {
		name string
		body string
		want rail.Outcome
	}{
		{"as_sent", good, rail.Applied},
		{"amount_in_upper_case_too", strings.Replace(good, `"amount":1500`, `"amount":5000,"AMOUNT":1500`, 1), rail.Ambiguous},
		{"amount_twice", strings.Replace(good, `"amount":1500`, `"amount":5000,"amount":1500`, 1), rail.Ambiguous},
		{"amount_only_in_upper_case", strings.Replace(good, `"amount":1500`, `"Amount":1500`, 1), rail.Ambiguous},
		{"object_in_other_case", strings.Replace(good, `"object":"refund"`, `"OBJECT":"refund"`, 1), rail.Ambiguous},
		{"stamp_twice", strings.Replace(good, `"order":"42"`, `"countersign_sik":"OTHER"`, 1), rail.Ambiguous},
		{"stamp_case_variant", strings.Replace(good, `"order":"42"`, `"COUNTERSIGN_SIK":"OTHER"`, 1), rail.Ambiguous},
		{"payment_intent_case_variant", strings.Replace(good, `"payment_intent":"pi_1"`, `"payment_intent":"pi_1","Payment_Intent":"pi_2"`, 1), rail.Ambiguous},
		{"unknown_member_any_case", strings.Replace(good, `"reason":null`, `"Reason":null,"fee_details":[]`, 1), rail.Applied},
		{"gzip", gzipped(t, good), rail.Ambiguous},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := resp(200, tc.body)
			if tc.name == "gzip" {
				r.Headers = map[string]string{"Content-Encoding": "gzip"}
			}
			got := New().Classify(refundPI, r)
			if got.Outcome != tc.want {
				t.Fatalf("Classify = %v (%q), want %v", got.Outcome, got.Reason, tc.want)
			}
		})
	}
}

// FuzzClassify: Classify never panics, and never reads a rejection, a
// fingerprint mismatch or an application from a body it could not read
// strictly or from an encoded one.
func FuzzClassify(f *testing.F) {
	for _, tc := range classifyCases {
		if tc.Resp.TransportErr == nil {
			f.Add(tc.Resp.Status, string(tc.Resp.Body), "")
		}
	}
	f.Add(400, stripeErr("idempotency_error", "", "x"), "gzip")
	f.Add(400, `{"error":{"type":"a","TYPE":"b"}}`, "")
	f.Fuzz(func(t *testing.T, status int, body, coding string) {
		r := rail.Response{Status: status, Body: []byte(body), Headers: map[string]string{"content-encoding": coding}}
		got := New().Classify(refundPI, r)
		if strings.ContainsAny(got.Reason, "<>|`\n\r") {
			// The reason leaves in signed webhooks: none of the rail's markup.
			t.Fatalf("reason %q carries the rail's markup", got.Reason)
		}
		if got.Outcome == rail.Ambiguous || got.Outcome == rail.InProgress {
			return
		}
		if rail.AnswerEncoding(r.Headers) != nil {
			t.Fatalf("an encoded answer read as %v (%q)", got.Outcome, got.Reason)
		}
		if err := rail.CheckAnswerJSON(r.Body); err != nil {
			t.Fatalf("a body CheckAnswerJSON refuses (%v) read as %v (%q)", err, got.Outcome, got.Reason)
		}
	})
}
