package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// TestDecisionRecordIsBoundedWhateverTheRequestSays: a refused request
// with a 1 MiB x-request-id, a 60 KiB amount its parser quotes and a
// 60 KiB host writes a decision record of at most a few KiB, under a
// request id of its own; a plausible request id is kept.
func TestDecisionRecordIsBoundedWhateverTheRequestSays(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	req := r.refundOf(100)
	req.RequestID = strings.Repeat("a", 1<<20)
	req.Body = []byte("payment_intent=pi_1&amount=" + strings.Repeat("9x", 30<<10))
	req.Host = strings.Repeat("h", 60<<10)
	out := r.e.Decide(ctx, req)
	if out.Verdict != Block || out.DecisionID == 0 {
		t.Fatalf("the request = %s %s (decision %d): %s", out.Verdict, out.ReasonCode, out.DecisionID, clip(out.Reason, 200))
	}
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rid, reason, host string
	var size int
	if err := conn.QueryRow(ctx, `SELECT request_id, reason, host, pg_column_size(d.*) FROM decisions d WHERE id = $1`, out.DecisionID).Scan(&rid, &reason, &host, &size); err != nil {
		t.Fatal(err)
	}
	if len(rid) > maxRequestIDBytes || strings.Contains(rid, "aaaa") {
		t.Errorf("request id recorded as %d bytes %q: want one of Countersign's own", len(rid), clip(rid, 40))
	}
	if len(reason) > maxReasonBytes || !utf8.ValidString(reason) || !strings.HasSuffix(reason, "…") {
		t.Errorf("reason recorded as %d bytes: want it cut to %d", len(reason), maxReasonBytes)
	}
	if len(host) > maxHostBytes {
		t.Errorf("host recorded as %d bytes", len(host))
	}
	if size > 8<<10 {
		t.Errorf("the decision record is %d bytes", size)
	}

	// A request id that looks like one is the caller's, as sent.
	req = r.refundOf(100)
	req.RequestID = "5f0e1c2a-7b3d-4e8f-9a1b-2c3d4e5f6a7b"
	req.Body = []byte("payment_intent=pi_1&amount=x")
	out = r.e.Decide(ctx, req)
	if err := conn.QueryRow(ctx, `SELECT request_id FROM decisions WHERE id = $1`, out.DecisionID).Scan(&rid); err != nil || rid != req.RequestID {
		t.Errorf("a plausible request id recorded as %q, %v", rid, err)
	}
}

func TestRequestIDOf(t *testing.T) {
	for _, id := range []string{"5f0e1c2a-7b3d-4e8f-9a1b-2c3d4e5f6a7b", "task1-try2", "a", "x:y/z+w=@_.", strings.Repeat("b", maxRequestIDBytes)} {
		if got := requestIDOf(id); got != id {
			t.Errorf("requestIDOf(%q) = %q, want it kept", id, got)
		}
	}
	seen := map[string]bool{}
	for _, id := range []string{"", strings.Repeat("b", maxRequestIDBytes+1), "a b", "a\nb", "é", "a\x00", "<script>"} {
		got := requestIDOf(id)
		if got == id || !strings.HasPrefix(got, "cs_") || seen[got] || requestIDOf(got) != got {
			t.Errorf("requestIDOf(%q) = %q: want a fresh id of Countersign's own", id, got)
		}
		seen[got] = true
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijk", 10, "abcdefg…"},
		{"ééééé", 8, "éé…"}, // never half a character
	} {
		if got := clip(tc.in, tc.n); got != tc.want || len(got) > tc.n || !utf8.ValidString(got) {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestBoundedRequestParts: what the ext_authz span quotes is what a
// decision record keeps.
func TestBoundedRequestParts(t *testing.T) {
	long := strings.Repeat("é", 40<<10)
	if got := BoundedPath("/v1/refunds?secret=" + long); got != "/v1/refunds" {
		t.Errorf("BoundedPath kept the query: %.40q", got)
	}
	for name, tc := range map[string]struct {
		got string
		max int
	}{
		"path": {BoundedPath("/" + long), maxPathBytes}, "host": {BoundedHost(long), maxHostBytes}, "method": {BoundedMethod(long), maxHostBytes},
	} {
		if len(tc.got) > tc.max || !utf8.ValidString(tc.got) || !strings.HasSuffix(tc.got, "…") {
			t.Errorf("%s: %d bytes, want at most %d, cut on a character", name, len(tc.got), tc.max)
		}
	}
	if BoundedHost("api.stripe.com") != "api.stripe.com" || BoundedMethod("POST") != "POST" || BoundedPath("/v1/refunds") != "/v1/refunds" {
		t.Error("a short value was changed")
	}
}

// TestHeadersStoredAreBounded: a money call's headers are kept with its
// attempt, so headers past MaxHeaderBytes refuse the request before
// anything is stored but its bounded decision; headers up to the bound
// leave with the attempt as sent.
func TestHeadersStoredAreBounded(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	junk := func(req Request, total int) Request {
		req.Headers = map[string]string{"content-type": "application/x-www-form-urlencoded"}
		for i := 0; HeaderBytes(req.Headers) < total; i++ {
			req.Headers[fmt.Sprintf("x-junk-%03d", i)] = strings.Repeat("j", min(2000, total-HeaderBytes(req.Headers)-10))
		}
		return req
	}
	big := junk(r.refundOf(100), MaxHeaderBytes+1)
	out := r.e.Decide(ctx, big)
	if out.Verdict != Block || out.ReasonCode != ReasonHeadersTooLarge || out.HTTPStatus != 431 {
		t.Fatalf("headers of %d bytes: %s %s (%d): %s", HeaderBytes(big.Headers), out.Verdict, out.ReasonCode, out.HTTPStatus, out.Reason)
	}
	var intents int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM intents`).Scan(&intents); err != nil || intents != 0 {
		t.Fatalf("intents after the refusal: %d, %v", intents, err)
	}
	var size int
	if err := conn.QueryRow(ctx, `SELECT pg_column_size(d.*) FROM decisions d WHERE id = $1`, out.DecisionID).Scan(&size); err != nil || size > 4<<10 {
		t.Errorf("the refusal's decision record: %d bytes, %v", size, err)
	}

	fits := junk(r.refundOf(100), MaxHeaderBytes)
	if n := HeaderBytes(fits.Headers); n != MaxHeaderBytes {
		t.Fatalf("the fitting headers are %d bytes", n)
	}
	if out := r.e.Decide(ctx, fits); out.Verdict != Allow {
		t.Fatalf("headers of exactly %d bytes: %s %s: %s", MaxHeaderBytes, out.Verdict, out.ReasonCode, out.Reason)
	}
	var stored int
	if err := conn.QueryRow(ctx, `SELECT octet_length(request_headers::text) FROM attempts`).Scan(&stored); err != nil || stored < MaxHeaderBytes || stored > 2*MaxHeaderBytes {
		t.Errorf("the attempt keeps %d bytes of headers, %v", stored, err)
	}
}
