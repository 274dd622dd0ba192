package extproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/extauthz"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Committer that remembers what it was asked to commit.
type recorder struct {
	mu      sync.Mutex
	commits []commit
	// marks are the stamped flags of MarkSent, in order; markErr, if
	// set, is every MarkSent's answer.
	marks   []bool
	markErr error
	done    chan struct{}
}

type commit struct {
	ref  engine.IntentRef
	resp rail.Response
}

func (r *recorder) MarkSent(_ context.Context, ref engine.IntentRef, stamped bool) (engine.IntentRef, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.marks = append(r.marks, stamped)
	if r.markErr != nil {
		return ref, r.markErr
	}
	ref.BodyStamped = stamped
	return ref, nil
}

func (r *recorder) Commit(_ context.Context, ref engine.IntentRef, resp rail.Response) (ledger.Intent, rail.Classification, error) {
	r.mu.Lock()
	r.commits = append(r.commits, commit{ref, resp})
	r.mu.Unlock()
	r.done <- struct{}{}
	return ledger.Intent{}, rail.Classification{Outcome: rail.Applied}, nil
}

func dial(t *testing.T, c Committer) extprocv3.ExternalProcessorClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, NewServer(c, slog.New(slog.NewTextHandler(io.Discard, nil))))
	go gs.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	return extprocv3.NewExternalProcessorClient(conn)
}

// decidedBody is the body ext_authz decided on in these tests.
const decidedBody = "payment_intent=pi_1&amount=100"

var ref = &engine.IntentRef{RailAccount: "acct_1", SIK: "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", AttemptSeq: 1,
	Stamp: "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", BodyField: "metadata[countersign_sik]", BodyValue: "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567",
	BodySHA256: extauthz.BodyDigest([]byte(decidedBody))}

// md is the ext_authz dynamic metadata as Envoy forwards it to ext_proc.
func md() *corev3.Metadata { return mdOf(ref) }

func mdOf(r *engine.IntentRef) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{extauthz.MetadataNamespace: extauthz.IntentMetadata(r)}}
}

func headers(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// exchangeWith opens one ext_proc stream to a server committing through
// rec, and send, which sends a phase carrying the test's intent (ref) and
// returns its answer.
func exchangeWith(t *testing.T, rec *recorder) (extprocv3.ExternalProcessor_ProcessClient, func(*extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse) {
	t.Helper()
	client := dial(t, rec)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, err := client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st, func(r *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
		t.Helper()
		r.MetadataContext = md()
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

func TestProcessStampsAndCommits(t *testing.T) {
	rec := &recorder{done: make(chan struct{}, 4)}
	st, send := exchangeWith(t, rec)
	if r := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headers(":method", "POST", ":path", "/v1/refunds", "content-type", "application/x-www-form-urlencoded")}}}); r.GetRequestHeaders() == nil {
		t.Fatalf("request headers answer = %v", r)
	}
	r := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: []byte(decidedBody), EndOfStream: true}}})
	body := r.GetRequestBody().GetResponse().GetBodyMutation().GetBody()
	if want := "amount=100&metadata%5Bcountersign_sik%5D=" + ref.BodyValue + "&payment_intent=pi_1"; string(body) != want {
		t.Fatalf("stamped body = %q, want %q", body, want)
	}
	var length string
	for _, h := range r.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "content-length" {
			length = string(h.GetHeader().GetRawValue())
		}
	}
	if length != "93" || len(body) != 93 {
		t.Fatalf("content-length %q for a %d-byte body", length, len(body))
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headers(":status", "200", "content-type", "application/json")}}})
	if len(rec.commits) != 0 {
		t.Fatal("committed before the response body")
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: []byte(`{"id":"re_1"}`), EndOfStream: true}}})
	<-rec.done
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end = %v", err)
	}
	c := rec.commits[0]
	if !slices.Equal(rec.marks, []bool{true}) {
		t.Fatalf("marks before the request left = %v, want one, stamped", rec.marks)
	}
	if len(rec.commits) != 1 || c.resp.Status != 200 || string(c.resp.Body) != `{"id":"re_1"}` || c.ref.SIK != ref.SIK || !c.ref.BodyStamped {
		t.Fatalf("commits = %+v", rec.commits)
	}
}

func TestProcessLostResponseIsAmbiguous(t *testing.T) {
	rec := &recorder{done: make(chan struct{}, 4)}
	client := dial(t, rec)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&extprocv3.ProcessingRequest{MetadataContext: md(), Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headers(":method", "POST")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	// The upstream reset: Envoy closes the stream with no response phase.
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	<-rec.done
	if c := rec.commits[0]; c.resp.TransportErr == nil || c.resp.Status != 0 {
		t.Fatalf("lost response committed as %+v", c.resp)
	}
}

func TestProcessWithoutIntentCommitsNothing(t *testing.T) {
	rec := &recorder{done: make(chan struct{}, 4)}
	client := dial(t, rec)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headers(":method", "GET")}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: headers(":status", "200")}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("{}"), EndOfStream: true}}},
	} {
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if len(rec.commits) != 0 {
		t.Fatalf("a read was committed: %+v", rec.commits)
	}
}

// TestOnlyTheDecidedBodyLeaves: a body other than the one ext_authz decided
// on — changed by one byte, sent in parts, emptied, or with no decision to
// compare against — is stopped at Envoy (an immediate response), never
// stamped, and the attempt is committed as stopped here (ambiguous until
// the reconciler proves it absent).
func TestOnlyTheDecidedBodyLeaves(t *testing.T) {
	unbound := *ref
	unbound.BodySHA256 = ""
	bodyPhase := func(body string, end bool) *extprocv3.ProcessingRequest {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: end}}}
	}
	cases := []struct {
		name    string
		ref     *engine.IntentRef
		phases  []*extprocv3.ProcessingRequest // after the request headers
		headEnd bool                           // the headers end the stream (no body)
		details string
	}{
		{"amount changed", ref, []*extprocv3.ProcessingRequest{bodyPhase("payment_intent=pi_1&amount=900", true)}, false, "countersign_body_changed"},
		{"one byte appended", ref, []*extprocv3.ProcessingRequest{bodyPhase(decidedBody+"&", true)}, false, "countersign_body_changed"},
		{"body in parts", ref, []*extprocv3.ProcessingRequest{bodyPhase(decidedBody, false)}, false, "countersign_body_partial"},
		{"body emptied", ref, nil, true, "countersign_body_changed"},
		{"no decided digest", &unbound, []*extprocv3.ProcessingRequest{bodyPhase(decidedBody, true)}, false, "countersign_body_unbound"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{done: make(chan struct{}, 4)}
			client := dial(t, rec)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := client.Process(ctx)
			if err != nil {
				t.Fatal(err)
			}
			phases := append([]*extprocv3.ProcessingRequest{{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: headers(":method", "POST", ":path", "/v1/refunds"), EndOfStream: tc.headEnd}}}}, tc.phases...)
			var last *extprocv3.ProcessingResponse
			for _, p := range phases {
				p.MetadataContext = mdOf(tc.ref)
				if err := st.Send(p); err != nil {
					t.Fatal(err)
				}
				if last, err = st.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			im := last.GetImmediateResponse()
			if im == nil || im.GetStatus().GetCode() != 403 || im.GetDetails() != tc.details {
				t.Fatalf("answer = %v; want an immediate 403 with details %s", last, tc.details)
			}
			select {
			case <-rec.done:
			case <-ctx.Done():
				t.Fatal("the stopped attempt was not committed")
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.marks) != 0 {
				t.Errorf("a refused body was marked sent: %v", rec.marks)
			}
			// Ambiguous, not rejected: the reconciler proves the absence
			// and the retry keeps the stamp (a rejection would reopen
			// under a new one).
			if c := rec.commits[0]; c.resp.Status != 0 || !errors.Is(c.resp.TransportErr, errStoppedHere) {
				t.Errorf("committed %+v; want the stopped-here answer", c.resp)
			}
			_ = st.CloseSend()
		})
	}
}

// TestUnstampedRequestsAreMarkedBeforeTheyLeave: an allowed request that
// cannot carry the body stamp (its headers end the stream, so there is no
// body to write it in; or its rail has no place for it, an MCP tool
// without a metadata argument) leaves only after its attempt is marked
// sent unstamped, in the statement that checks the attempt is live; if
// that mark fails, it does not leave. Unmarked, the reconciler took such
// a request for one that never left and settled an ambiguous answer as
// not applied, though the rail had applied it (its listing cannot show an
// unstamped request): the refund was paid twice.
func TestUnstampedRequestsAreMarkedBeforeTheyLeave(t *testing.T) {
	fieldless := *ref
	fieldless.BodyField, fieldless.BodyValue = "", ""
	// Decided with no body, on a call with no place for the stamp (a
	// bodiless call that can carry one leaves with a body of Countersign's:
	// TestABodilessRequestLeavesWithCountersignsBody).
	empty := fieldless
	empty.BodySHA256 = extauthz.BodyDigest(nil)
	cases := []struct {
		name  string
		ref   *engine.IntentRef
		body  bool // a body phase follows the headers
		cont  func(*extprocv3.ProcessingResponse) bool
		phase string
	}{
		{"headers end the stream", &empty, false, func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestHeaders() != nil }, "request headers"},
		{"no place for the stamp", &fieldless, true, func(r *extprocv3.ProcessingResponse) bool {
			return r.GetRequestBody() != nil && r.GetRequestBody().GetResponse().GetBodyMutation() == nil
		}, "request body"},
		// HTTP/2: headers that do not end the stream, no data, trailers
		// that do. Envoy sends no body phase then (found by an
		// attacker's-eye review: with trailers skipped, the request left
		// unrecorded and a listing could prove it absent).
		{"trailers end it, no body", &empty, false, func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestTrailers() != nil }, "request trailers"},
	}
	for _, tc := range cases {
		for _, fail := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mark fails=%v", tc.name, fail), func(t *testing.T) {
				rec := &recorder{done: make(chan struct{}, 4)}
				if fail {
					rec.markErr = ledger.ErrAttemptNotLive
				}
				st := openStream(t, rec)
				trailers := tc.phase == "request trailers"
				phases := []*extprocv3.ProcessingRequest{{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
					Headers: headers(":method", "POST", ":path", "/v1/refunds"), EndOfStream: !tc.body && !trailers}}}}
				if trailers {
					phases = append(phases, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{
						Trailers: headers("x-trailer", "1")}}})
				}
				if tc.body {
					phases = append(phases, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
						Body: []byte(decidedBody), EndOfStream: true}}})
				}
				var last *extprocv3.ProcessingResponse
				var err error
				for _, p := range phases {
					p.MetadataContext = mdOf(tc.ref)
					if err := st.Send(p); err != nil {
						t.Fatal(err)
					}
					if last, err = st.Recv(); err != nil {
						t.Fatal(err)
					}
				}
				rec.mu.Lock()
				defer rec.mu.Unlock()
				if !slices.Equal(rec.marks, []bool{false}) {
					t.Fatalf("marks = %v; want one, unstamped, before the %s phase answered", rec.marks, tc.phase)
				}
				if fail {
					if im := last.GetImmediateResponse(); im == nil || im.GetStatus().GetCode() != 503 {
						t.Fatalf("the mark failed, but the %s phase answered %v; want the request stopped (an immediate 503)", tc.phase, last)
					}
					return
				}
				if !tc.cont(last) {
					t.Fatalf("the %s phase answered %v; want the request to continue as it came", tc.phase, last)
				}
			})
		}
	}
}

// TestAnswerWhoseBodyIsLostIsAmbiguous: the rail's response headers reach
// ext_proc, then the stream ends before the body phase (the agent resets
// its stream, or the rail stalls mid-body until the route times out): the
// answer is committed ambiguous, whatever the status says. Committed as
// the status alone, a 400 read as a rejection: an intent the rail may have
// applied (Razorpay's GATEWAY_ERROR is no definite refusal) reopened under
// a new idempotency key, and Stripe's idempotency_error never reached
// quarantine (found by an attacker's-eye review).
func TestAnswerWhoseBodyIsLostIsAmbiguous(t *testing.T) {
	rec := &recorder{done: make(chan struct{}, 4)}
	st, send := exchangeWith(t, rec)
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headers(":method", "POST")}}})
	if r := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(decidedBody), EndOfStream: true}}}); r.GetImmediateResponse() != nil {
		t.Fatalf("refused: %v", r)
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: headers(":status", "400", "content-type", "application/json")}}})
	if err := st.CloseSend(); err != nil { // filter destroyed: the body phase never comes
		t.Fatal(err)
	}
	<-rec.done
	rec.mu.Lock()
	got := rec.commits[0].resp
	rec.mu.Unlock()
	if !errors.Is(got.TransportErr, errBodyLost) {
		t.Fatalf("committed %d %q with transport error %v; want the body lost", got.Status, got.Body, got.TransportErr)
	}

	amt := int64(100)
	a := rail.Action{Kind: sik.KindRefund, Subject: "pay_1", AmountMinor: &amt, Currency: "INR"}
	whole := got
	whole.Body = []byte(`{"error":{"code":"GATEWAY_ERROR","description":"Payment processing failed due to error at bank or wallet gateway"}}`)
	whole.TransportErr = nil
	rz := razorpay.New()
	if c := rz.Classify(a, whole); c.Outcome != rail.Ambiguous {
		t.Fatalf("the rail's whole answer (GATEWAY_ERROR) is %v; the premise is that it is ambiguous", c.Outcome)
	}
	sa := rail.Action{Kind: sik.KindRefund, Subject: "pi_1", AmountMinor: &amt, Currency: "USD"}
	for name, c := range map[string]rail.Classification{"razorpay": rz.Classify(a, got), "stripe": stripe.New().Classify(sa, got)} {
		if c.Outcome != rail.Ambiguous {
			t.Errorf("%s: an answer whose body was lost is classified %v (%s), not ambiguous", name, c.Outcome, c.Reason)
		}
	}
}

// TestStampedBodyLeavesWithItsMediaType: whatever Content-Type the agent
// sent (none, for a Razorpay body of spaces Countersign reads as a full
// refund; "application/JSON", which Countersign's parser accepts), the
// stamped body leaves with the media type it is written in, spelled as a
// rail reads it. Before, both left as the agent typed them, and a rail
// that reads JSON only under "application/json" read no parameters: a
// full refund, without the stamp, which the reconciler then "proved"
// absent.
func TestStampedBodyLeavesWithItsMediaType(t *testing.T) {
	jsonRef := *ref
	jsonRef.BodyField = "notes.countersign_sik"
	for _, tc := range []struct {
		name, body, contentType, want string
		ref                           engine.IntentRef
	}{
		{"razorpay body of spaces, no content type", "   ", "", "application/json", jsonRef},
		{"razorpay json typed in capitals", `{"amount":100}`, "application/JSON", "application/json", jsonRef},
		{"stripe form typed in capitals with a charset", decidedBody, "APPLICATION/X-WWW-FORM-URLENCODED; charset=utf-8", "application/x-www-form-urlencoded", *ref},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.ref
			r.BodySHA256 = extauthz.BodyDigest([]byte(tc.body))
			client := dial(t, &recorder{done: make(chan struct{}, 4)})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := client.Process(ctx)
			if err != nil {
				t.Fatal(err)
			}
			send := func(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
				t.Helper()
				req.MetadataContext = mdOf(&r)
				if err := st.Send(req); err != nil {
					t.Fatal(err)
				}
				resp, err := st.Recv()
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			hs := []string{":method", "POST", ":path", "/v1/refunds"}
			if tc.contentType != "" {
				hs = append(hs, "content-type", tc.contentType)
			}
			send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headers(hs...)}}})
			resp := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
				Body: []byte(tc.body), EndOfStream: true}}})
			if resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody() == nil {
				t.Fatalf("the body was not stamped: %v", resp)
			}
			var got []string
			for _, h := range resp.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
				if h.GetHeader().GetKey() == "content-type" {
					got = append(got, string(h.GetHeader().GetRawValue()))
				}
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("content-type set to %q, want %q", got, tc.want)
			}
		})
	}
}

// TestABodilessRequestLeavesWithCountersignsBody: a request decided with no
// body (a Razorpay full refund sent with none) on a call that can carry the
// stamp leaves with a body of Countersign's, the stamp and the full
// refund's amount, written at the request headers with CONTINUE_AND_REPLACE
// whether the headers end the stream or trailers will; it is marked
// stamped before it leaves, so a listing can prove it absent, and the rail
// refunds what its intent holds. Before, it left unstamped: an ambiguous
// answer quarantined it, and the rail refunded whatever was refundable.
func TestABodilessRequestLeavesWithCountersignsBody(t *testing.T) {
	rp := &engine.IntentRef{RailAccount: "acct_rzp", SIK: "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", AttemptSeq: 1,
		BodyField: "notes.countersign_sik", BodyValue: "STAMP", AmountField: "amount", Amount: 50000, BodySHA256: extauthz.BodyDigest(nil)}
	for _, trailers := range []bool{false, true} {
		t.Run(fmt.Sprintf("trailers=%v", trailers), func(t *testing.T) {
			rec := &recorder{done: make(chan struct{}, 4)}
			st := openStream(t, rec)
			if err := st.Send(&extprocv3.ProcessingRequest{MetadataContext: mdOf(rp), Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: headers(":method", "POST", ":path", "/v1/payments/pay_1/refund"), EndOfStream: !trailers}}}); err != nil {
				t.Fatal(err)
			}
			resp, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			cr := resp.GetRequestHeaders().GetResponse()
			if cr.GetStatus() != extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
				t.Fatalf("the headers' answer = %v; want CONTINUE_AND_REPLACE with a body", resp)
			}
			var got struct {
				Amount int64             `json:"amount"`
				Notes  map[string]string `json:"notes"`
			}
			if err := json.Unmarshal(cr.GetBodyMutation().GetBody(), &got); err != nil || got.Amount != 50000 || got.Notes["countersign_sik"] != "STAMP" {
				t.Fatalf("the body it leaves with = %s (%v); want the stamp and amount 50000", cr.GetBodyMutation().GetBody(), err)
			}
			ct := ""
			for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
				if h.GetHeader().GetKey() == "content-type" {
					ct = string(h.GetHeader().GetRawValue())
				}
			}
			if ct != "application/json" {
				t.Fatalf("content-type set = %q; want application/json", ct)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if !slices.Equal(rec.marks, []bool{true}) {
				t.Fatalf("marks = %v; want one, stamped, before it left", rec.marks)
			}
		})
	}
}

// TestUnreadableAttemptMetadataStopsTheRequest: ext_authz allowed an
// attempt whose metadata ext_proc cannot read (an amount to write that is
// not a number, no attempt number): the request is stopped at its headers,
// not let through unmarked and unstamped, which a listing could later
// prove absent. A request with no attempt metadata at all (not a money
// call) passes as it came.
func TestUnreadableAttemptMetadataStopsTheRequest(t *testing.T) {
	bad := *ref
	bad.AmountField, bad.Amount = "amount", 0 // written as "0": no amount to write
	noSeq := *ref
	noSeq.AttemptSeq = 0
	for name, md := range map[string]*corev3.Metadata{
		"an amount that is no amount": mdOf(&bad),
		"no attempt number":           mdOf(&noSeq),
		"no attempt metadata":         nil,
	} {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{done: make(chan struct{}, 4)}
			st := openStream(t, rec)
			if err := st.Send(&extprocv3.ProcessingRequest{MetadataContext: md, Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: headers(":method", "POST", ":path", "/v1/refunds")}}}); err != nil {
				t.Fatal(err)
			}
			resp, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			stopped := resp.GetImmediateResponse().GetStatus().GetCode() == 503
			if want := md != nil; stopped != want {
				t.Fatalf("the headers' answer = %v; want stopped = %v", resp, want)
			}
		})
	}
}

// openStream opens an ext_proc stream to a server committing to c, closed
// (and its context ended, at most 10 s on) when the test ends.
func openStream(t *testing.T, c Committer) extprocv3.ExternalProcessor_ProcessClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, err := dial(t, c).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.CloseSend() })
	return st
}

// TestUnreadableAttemptMetadataStopsEveryRequestPhase: a processing mode
// that skips the request headers brings the metadata first with the body
// or the trailers; an unreadable attempt is stopped there too, never
// passed on unmarked and unstamped.
func TestUnreadableAttemptMetadataStopsEveryRequestPhase(t *testing.T) {
	bad := *ref
	bad.AttemptSeq = 0
	for name, phase := range map[string]*extprocv3.ProcessingRequest{
		"body": {Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body: []byte("amount=1500&payment_intent=pi_1"), EndOfStream: true}}},
		"trailers": {Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}},
	} {
		for _, unreadable := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/unreadable=%v", name, unreadable), func(t *testing.T) {
				rec := &recorder{done: make(chan struct{}, 4)}
				st := openStream(t, rec)
				phase.MetadataContext = nil
				if unreadable {
					phase.MetadataContext = mdOf(&bad)
				}
				if err := st.Send(phase); err != nil {
					t.Fatal(err)
				}
				resp, err := st.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if stopped := resp.GetImmediateResponse().GetStatus().GetCode() == 503; stopped != unreadable {
					t.Fatalf("the answer to the %s = %v; want stopped = %v", name, resp, unreadable)
				}
			})
		}
	}
}
