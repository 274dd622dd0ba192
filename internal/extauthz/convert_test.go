package extauthz

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/countersign/countersign/internal/engine"
)

func checkRequest(headers map[string]string, body string, raw []byte) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{
			Id: "req-1", Method: "POST", Host: "api.stripe.com", Path: "/v1/refunds",
			Headers: headers, Body: body, RawBody: raw,
		},
	}}}
}

func TestFromCheckRequest(t *testing.T) {
	basic := func(u, p string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) }
	cases := []struct {
		name      string
		req       *authv3.CheckRequest
		wantCred  string
		wantBody  string
		truncated bool
	}{
		{"nil request", nil, "", "", false},
		{"empty attributes", &authv3.CheckRequest{}, "", "", false},
		{"stripe bearer", checkRequest(map[string]string{"authorization": "Bearer csk_abc"}, "amount=1", nil), "csk_abc", "amount=1", false},
		{"bearer mixed case scheme", checkRequest(map[string]string{"Authorization": "bearer  csk_abc "}, "", nil), "csk_abc", "", false},
		{"razorpay basic secret", checkRequest(map[string]string{"authorization": basic("rzp_key", "csk_sec")}, "", nil), "csk_sec", "", false},
		{"razorpay basic user only", checkRequest(map[string]string{"authorization": basic("csk_user", "")}, "", nil), "csk_user", "", false},
		{"basic not base64", checkRequest(map[string]string{"authorization": "Basic !!!"}, "", nil), "", "", false},
		{"unknown scheme", checkRequest(map[string]string{"authorization": "Digest x"}, "", nil), "", "", false},
		{"raw body wins", checkRequest(nil, "text", []byte("raw")), "", "raw", false},
		{"partial body", checkRequest(map[string]string{PartialBodyHeader: "true"}, "amou", nil), "", "amou", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := FromCheckRequest(tc.req, 64<<10)
			if got.Source != engine.SourceExtAuthz {
				t.Errorf("source = %q", got.Source)
			}
			if got.Credential != tc.wantCred {
				t.Errorf("credential = %q, want %q", got.Credential, tc.wantCred)
			}
			if string(got.Body) != tc.wantBody {
				t.Errorf("body = %q, want %q", got.Body, tc.wantBody)
			}
			if got.BodyTruncated != tc.truncated {
				t.Errorf("truncated = %v, want %v", got.BodyTruncated, tc.truncated)
			}
			for _, h := range credentialHeaders {
				if _, ok := got.Headers[h]; ok {
					t.Errorf("credential header %q reached the engine", h)
				}
			}
		})
	}
}

func TestToCheckResponseDeny(t *testing.T) {
	out := engine.Outcome{Verdict: engine.Block, ReasonCode: "credential_unknown", Reason: "nope", HTTPStatus: 403, Body: []byte(`{"error":{}}`)}
	resp := ToCheckResponse(out)
	if codes.Code(resp.GetStatus().GetCode()) != codes.PermissionDenied {
		t.Fatalf("status = %v", resp.GetStatus())
	}
	d := resp.GetDeniedResponse()
	if d == nil || d.GetStatus().GetCode() != 403 || d.GetBody() != `{"error":{}}` {
		t.Fatalf("denied response = %v", d)
	}
	if got := headerValue(d.GetHeaders(), "x-countersign-reason"); got != "credential_unknown" {
		t.Errorf("reason header = %q", got)
	}
	if got := headerValue(d.GetHeaders(), "content-type"); got != "application/json" {
		t.Errorf("content-type = %q", got)
	}
	// A deny without an explicit status still refuses with 403.
	if ToCheckResponse(engine.Outcome{Verdict: engine.Hold}).GetDeniedResponse().GetStatus().GetCode() != 403 {
		t.Error("HOLD without status must be a 403 deny")
	}
}

func TestToCheckResponseAllowRemovesCredentials(t *testing.T) {
	resp := ToCheckResponse(engine.Outcome{Verdict: engine.Allow})
	if codes.Code(resp.GetStatus().GetCode()) != codes.OK {
		t.Fatalf("status = %v", resp.GetStatus())
	}
	removed := map[string]bool{}
	for _, h := range resp.GetOkResponse().GetHeadersToRemove() {
		removed[h] = true
	}
	for _, h := range credentialHeaders {
		if !removed[h] {
			t.Errorf("ALLOW keeps the agent's %q header", h)
		}
	}
}

func headerValue(hs []*corev3.HeaderValueOption, k string) string {
	for _, h := range hs {
		if h.GetHeader().GetKey() == k {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}

func FuzzFromCheckRequest(f *testing.F) {
	f.Add("Bearer csk_x", "amount=100", "true")
	f.Add("Basic "+base64.StdEncoding.EncodeToString([]byte("a:b")), "", "")
	f.Fuzz(func(t *testing.T, auth, body, partial string) {
		r := FromCheckRequest(checkRequest(map[string]string{"authorization": auth, PartialBodyHeader: partial}, body, nil), 16)
		if _, ok := r.Headers["authorization"]; ok {
			t.Fatal("authorization header reached the engine")
		}
		// No content-length: a body at the bound, or one Envoy called
		// partial, is never taken for whole.
		if (len(body) >= 16 || strings.EqualFold(partial, "true")) && !r.BodyTruncated {
			t.Fatalf("body of %d bytes (partial %q) taken for whole", len(body), partial)
		}
	})
}

// TestBodyIsWhole: whether the gates saw the whole body rests on Envoy's
// flag, the declared length and the bound together, never on one alone.
func TestBodyIsWhole(t *testing.T) {
	const bound = 64
	cases := []struct {
		name    string
		headers map[string]string
		seen    int
		whole   bool
	}{
		{"no body, nothing declared", map[string]string{}, 0, true},
		{"declared and seen agree", map[string]string{"content-length": "30"}, 30, true},
		{"envoy says partial", map[string]string{PartialBodyHeader: "true", "content-length": "30"}, 30, false},
		{"envoy says partial in capitals", map[string]string{PartialBodyHeader: "TRUE"}, 10, false},
		// Envoy started the check with the buffer exactly full: its flag
		// says false, the declared length says more is coming.
		{"buffer exactly full, more declared", map[string]string{PartialBodyHeader: "false", "content-length": "100000"}, bound, false},
		{"declared more than seen", map[string]string{"content-length": "31"}, 30, false},
		{"declared less than seen", map[string]string{"content-length": "29"}, 30, false},
		{"declared with a sign", map[string]string{"content-length": "+30"}, 30, false},
		{"declared twice", map[string]string{"content-length": "30, 30"}, 30, false},
		{"declared empty", map[string]string{"content-length": ""}, 0, false},
		{"declared not a number", map[string]string{"content-length": "thirty"}, 30, false},
		{"body but no declared length and no body buffered", map[string]string{"content-length": "57"}, 0, false},
		{"chunked below the bound", map[string]string{"transfer-encoding": "chunked"}, bound - 1, true},
		{"chunked at the bound", map[string]string{"transfer-encoding": "chunked", PartialBodyHeader: "false"}, bound, false},
		// The check starts when the buffer is full, before the stream ends:
		// the agent could hold the end back after an ALLOW.
		{"declared length equal to the bound and to what was seen", map[string]string{"content-length": "64"}, bound, false},
		{"declared length over the bound and equal to what was seen", map[string]string{"content-length": "100"}, 100, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := BodyIsWhole(tc.headers, tc.seen, bound); got != tc.whole {
				t.Fatalf("BodyIsWhole = %v, want %v", got, tc.whole)
			}
		})
	}
}

// TestCheckBindsTheDecidedBody: an allowed attempt's metadata carries the
// digest of exactly the body the engine was given.
func TestCheckBindsTheDecidedBody(t *testing.T) {
	ref := &engine.IntentRef{RailAccount: "acct_1", SIK: "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", AttemptSeq: 1, Stamp: "s"}
	d := deciderFunc(func(_ context.Context, r engine.Request) engine.Outcome {
		if string(r.Body) != "amount=100&payment_intent=pi_1" {
			t.Errorf("engine got body %q", r.Body)
		}
		return engine.Outcome{Verdict: engine.Allow, Intent: ref}
	})
	resp, err := NewServer(d, 1024).Check(context.Background(), checkRequest(map[string]string{"content-length": "30"}, "", []byte("amount=100&payment_intent=pi_1")))
	if err != nil {
		t.Fatal(err)
	}
	got, ok := IntentFromMetadata(resp.GetDynamicMetadata())
	if !ok {
		t.Fatalf("no intent in the metadata: %v", resp.GetDynamicMetadata())
	}
	if want := BodyDigest([]byte("amount=100&payment_intent=pi_1")); got.BodySHA256 != want || len(want) != 64 {
		t.Fatalf("body digest = %q, want %q", got.BodySHA256, want)
	}
	if ref.BodySHA256 != "" {
		t.Fatal("Check wrote into the engine's IntentRef")
	}
}

type deciderFunc func(context.Context, engine.Request) engine.Outcome

func (f deciderFunc) Decide(ctx context.Context, r engine.Request) engine.Outcome { return f(ctx, r) }

func TestToCheckResponseAllowInjectsRailKeyAndStamp(t *testing.T) {
	ref := &engine.IntentRef{RailAccount: "acct_1", SIK: "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", AttemptSeq: 2, Stamp: "s", BodyField: "metadata[countersign_sik]", BodyValue: "s"}
	resp := ToCheckResponse(engine.Outcome{Verdict: engine.Allow, Intent: ref,
		SetHeaders: map[string]string{"authorization": "Bearer sk_test_rail", "idempotency-key": "s"}})
	ok := resp.GetOkResponse()
	if got := headerValue(ok.GetHeaders(), "authorization"); got != "Bearer sk_test_rail" {
		t.Fatalf("authorization = %q", got)
	}
	if got := headerValue(ok.GetHeaders(), "idempotency-key"); got != "s" {
		t.Fatalf("idempotency-key = %q", got)
	}
	for _, h := range ok.GetHeadersToRemove() {
		if h == "authorization" {
			t.Fatal("authorization is both set and removed")
		}
	}
	if len(ok.GetHeadersToRemove()) != len(credentialHeaders)-1 {
		t.Fatalf("headers to remove = %v", ok.GetHeadersToRemove())
	}
	back, valid := IntentFromMetadata(resp.GetDynamicMetadata())
	if !valid || back != *ref {
		t.Fatalf("metadata round trip = %+v, %v", back, valid)
	}
	if _, valid := IntentFromMetadata(nil); valid {
		t.Fatal("nil metadata accepted")
	}
	// A full refund's amount to write travels with it; one that cannot be
	// read is no intent to send.
	full := *ref
	full.AmountField, full.Amount = "amount", 4000
	md := IntentMetadata(&full)
	if back, valid := IntentFromMetadata(md); !valid || back != full {
		t.Fatalf("metadata round trip with an amount = %+v, %v", back, valid)
	}
	for _, bad := range []string{"", "0", "-5", "4000.5", "x"} {
		md := IntentMetadata(&full)
		md.GetFields()["countersign"].GetStructValue().GetFields()["amount"] = structpb.NewStringValue(bad)
		if back, valid := IntentFromMetadata(md); valid {
			t.Errorf("amount %q read back as %+v", bad, back)
		}
	}
}

// TestReplayIsLabelledAsWhatItIs: a duplicate of an applied refund is
// answered with the rail's stored answer; it says REPLAY, not BLOCK, while
// a refusal still says BLOCK.
func TestReplayIsLabelledAsWhatItIs(t *testing.T) {
	verdictOf := func(out engine.Outcome) string {
		return headerValue(ToCheckResponse(out).GetDeniedResponse().GetHeaders(), "x-countersign-verdict")
	}
	replay := engine.Outcome{Verdict: engine.Block, Replayed: true, ReasonCode: "duplicate_applied", HTTPStatus: 200, Body: []byte(`{"id":"re_1"}`),
		ResponseHeaders: map[string]string{"x-countersign-replay": "true"}}
	if got := verdictOf(replay); got != VerdictReplay {
		t.Errorf("replayed answer says %q, want %q", got, VerdictReplay)
	}
	refusal := engine.Outcome{Verdict: engine.Block, ReasonCode: "amount_above_maximum", HTTPStatus: 403, Body: []byte(`{}`)}
	if got := verdictOf(refusal); got != "BLOCK" {
		t.Errorf("refusal says %q, want BLOCK", got)
	}
}

// TestRateLimitedDenyCarriesRetryAfter: a refusal for the agent's rail
// reads reaches the agent as the 429 it is, with Retry-After.
func TestRateLimitedDenyCarriesRetryAfter(t *testing.T) {
	out := engine.Outcome{Verdict: engine.Block, ReasonCode: engine.ReasonRailReadsLimited, Reason: "no money moved; retry after 3s",
		HTTPStatus: 429, Body: []byte(`{"error":{"code":"rail_reads_limited"}}`), ResponseHeaders: map[string]string{"retry-after": "3"}}
	resp := ToCheckResponse(out)
	d := resp.GetDeniedResponse()
	if codes.Code(resp.GetStatus().GetCode()) != codes.PermissionDenied || d.GetStatus().GetCode() != 429 {
		t.Fatalf("status %v, denied status %v; want PERMISSION_DENIED and 429", resp.GetStatus(), d.GetStatus())
	}
	if got := headerValue(d.GetHeaders(), "retry-after"); got != "3" {
		t.Errorf("retry-after = %q, want 3", got)
	}
	if got := headerValue(d.GetHeaders(), "x-countersign-reason"); got != engine.ReasonRailReadsLimited {
		t.Errorf("reason header = %q", got)
	}
}

// TestIntentMetadataCarriesTheCallID: the JSON-RPC id an MCP call leaves
// with travels from ext_authz to ext_proc, which writes it and checks the
// answer against it; an attempt without one reads back without one.
func TestIntentMetadataCarriesTheCallID(t *testing.T) {
	ref := engine.IntentRef{RailAccount: "acct_mcp", SIK: "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", AttemptSeq: 3, Stamp: "s",
		BodyField: "params.arguments.metadata.countersign_sik", BodyValue: "s", CallID: "countersign-ABCDEFGHIJKLMNOPQRSTUVWXYZ234567#3"}
	resp := ToCheckResponse(engine.Outcome{Verdict: engine.Allow, Intent: &ref})
	if back, ok := IntentFromMetadata(resp.GetDynamicMetadata()); !ok || back != ref {
		t.Fatalf("metadata round trip = %+v, %v; want %+v", back, ok, ref)
	}
	ref.CallID = ""
	if back, ok := IntentFromMetadata(IntentMetadata(&ref)); !ok || back != ref {
		t.Fatalf("metadata round trip without a call id = %+v, %v", back, ok)
	}
}
