package razorpay

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

// TestClassifyReadsRefusalsOnlyFromRazorpaysOwnError: a refusal is read
// from its body, never from its status alone. A body Countersign cannot
// read (compressed, a proxy's page, another shape, members twice) may
// stand for a GATEWAY_ERROR, whose bank call may have gone through: read
// as a rejection, the next identical request would go out under a new
// key, a possible second payment. Every 4xx status × encoding × body is
// covered.
func TestClassifyReadsRefusalsOnlyFromRazorpaysOwnError(t *testing.T) {
	own := rzpErr("BAD_REQUEST_ERROR", "The refund amount provided is greater than amount captured")
	gateway := rzpErr("GATEWAY_ERROR", "Payment processing failed due to error at bank or wallet gateway")
	mismatch := rzpErr("BAD_REQUEST_ERROR", "Different request with the same idempotency key has already been processed.")
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
	bodies := map[string]struct {
		text string
		want func(status int) rail.Outcome // with no content coding
	}{
		"razorpay_error":    {own, rejected},
		"gateway_error":     {gateway, unread},
		"key_mismatch":      {mismatch, func(int) rail.Outcome { return rail.FingerprintMismatch }},
		"empty":             {"", unread},
		"html":              {"<html><body>400 Bad Request</body></html>", unread},
		"json_not_razorpay": {`{"message":"Bad Request","status":400}`, unread},
		"error_not_object":  {`{"error":"bad request"}`, unread},
		"no_description":    {`{"error":{"code":"BAD_REQUEST_ERROR"}}`, unread},
		"no_code":           {`{"error":{"description":"Bad request"}}`, unread},
		"truncated":         {own[:len(own)-3], unread},
		"error_twice":       {`{"error":{"code":"BAD_REQUEST_ERROR","description":"x"},"error":{"code":"GATEWAY_ERROR","description":"y"}}`, unread},
		"code_case_variant": {`{"error":{"code":"BAD_REQUEST_ERROR","CODE":"GATEWAY_ERROR","description":"x"}}`, unread},
		"code_upper_case":   {`{"error":{"Code":"BAD_REQUEST_ERROR","description":"x"}}`, unread},
		"error_upper_case":  {`{"Error":{"code":"BAD_REQUEST_ERROR","description":"x"}}`, unread},
	}
	encodings := map[string]bool{"": false, "identity": false, "IDENTITY": false, "gzip": true, "Gzip": true, "br": true, "deflate": true, "zstd": true}
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
						if strings.EqualFold(coding, "gzip") {
							r.Body = []byte(gzipped(t, b.text))
						}
					}
					got := New().Classify(refund, r)
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
// way here and another to the agent's SDK (and Razorpay's PHP): never
// Applied.
func TestClassifyCreatedRefusesMembersReadTwoWays(t *testing.T) {
	good := refundJSON("rfnd_1", "pay_1", 500100, `{"countersign_sik":"`+stampA+`","ticket":"7"}`)
	for _, tc := range []struct {
		name    string
		body    string
		headers map[string]string
		want    rail.Outcome
	}{
		{name: "as_sent", body: good, want: rail.Applied},
		{name: "identity", body: good, headers: map[string]string{"Content-Encoding": "identity"}, want: rail.Applied},
		{name: "amount_in_upper_case_too", body: strings.Replace(good, `"amount":500100`, `"amount":1,"AMOUNT":500100`, 1), want: rail.Ambiguous},
		{name: "amount_twice", body: strings.Replace(good, `"amount":500100`, `"amount":1,"amount":500100`, 1), want: rail.Ambiguous},
		{name: "amount_only_in_other_case", body: strings.Replace(good, `"amount":500100`, `"Amount":500100`, 1), want: rail.Ambiguous},
		{name: "payment_id_case_variant", body: strings.Replace(good, `"payment_id":"pay_1"`, `"payment_id":"pay_2","PAYMENT_ID":"pay_1"`, 1), want: rail.Ambiguous},
		{name: "stamp_twice", body: strings.Replace(good, `"ticket":"7"`, `"countersign_sik":"OTHER"`, 1), want: rail.Ambiguous},
		{name: "gzip", body: gzipped(t, good), headers: map[string]string{"content-encoding": "gzip"}, want: rail.Ambiguous},
		{name: "gzip_header_plain_body", body: good, headers: map[string]string{"content-encoding": "gzip"}, want: rail.Ambiguous},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := resp(200, tc.body)
			r.Headers = tc.headers
			got := New().Classify(refund, r)
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
	f.Add(400, rzpErr("GATEWAY_ERROR", "x"), "gzip")
	f.Add(400, `{"error":{"code":"BAD_REQUEST_ERROR","CODE":"GATEWAY_ERROR","description":"x"}}`, "")
	f.Fuzz(func(t *testing.T, status int, body, coding string) {
		r := rail.Response{Status: status, Body: []byte(body), Headers: map[string]string{"content-encoding": coding}}
		got := New().Classify(refund, r)
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
