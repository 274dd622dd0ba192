package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/outbox"
)

// rest calls the REST gateway with an Authorization header.
func (h *allowHarness) rest(t *testing.T, method, path, auth string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+h.httpAddr+path, rd)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestOwnerAPIOverREST(t *testing.T) {
	h := railHarness(t)
	owner := "Bearer " + h.ownerToken
	if s, body := h.rest(t, "GET", "/v1/agents", owner, nil); s != 200 || !strings.Contains(body, h.agentID) {
		t.Fatalf("owner lists agents: %d %s", s, body)
	}
	// An agent credential never opens the owner API.
	if s, body := h.rest(t, "GET", "/v1/agents", "Bearer "+h.secret, nil); s != 401 || !strings.Contains(body, "AGENT_CREDENTIAL") {
		t.Fatalf("agent credential on the owner API: %d %s", s, body)
	}
	// An owner token is never an agent credential.
	ownerCtx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+h.ownerToken)
	a := refund("pi_bench", 10, "")
	a.Rail, a.RailAccount = countersignv1.Rail_RAIL_STRIPE, "acct_bench"
	if _, err := countersignv1.NewDecisionServiceClient(h.conn).Decide(ownerCtx, &countersignv1.DecideRequest{
		Form: &countersignv1.DecideRequest_Action{Action: a}}); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "credential_unknown") {
		t.Fatalf("owner token as an agent credential: %v", err)
	}
	// The audit over REST: the owner's records, and verification of a rail
	// account the owner holds.
	h.decide(t, refund("pi_bench", 10, ""))
	if s, body := h.rest(t, "GET", "/v1/auditRecords?railAccount=acct_bench", owner, nil); s != 200 || !strings.Contains(body, `"recordId":"1"`) || !strings.Contains(body, `"leafHash":"`) {
		t.Fatalf("GET /v1/auditRecords = %d %s", s, body)
	}
	// Proofs over REST, once the log is sealed.
	if s, body := h.rest(t, "GET", "/v1/auditRecords/1/inclusionProof", owner, nil); s != 400 || !strings.Contains(body, "AUDIT_NOT_SEALED") {
		t.Fatalf("inclusion proof of an unsealed record = %d %s", s, body)
	}
	skey, _, err := audit.GenerateKey("rest.audit")
	if err != nil {
		t.Fatal(err)
	}
	signer, _, err := audit.ParseSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Seal(context.Background(), signer); err != nil {
		t.Fatal(err)
	}
	if s, body := h.rest(t, "GET", "/v1/auditRecords/1/inclusionProof", owner, nil); s != 200 || !strings.Contains(body, `"note":"countersign/audit/acct_bench\n1\n`) || !strings.Contains(body, `"proof":[`) {
		t.Fatalf("GET /v1/auditRecords/1/inclusionProof = %d %s", s, body)
	}
	if s, body := h.rest(t, "GET", "/v1/auditRecords/0/inclusionProof", owner, nil); s != 400 || !strings.Contains(body, "record_id") {
		t.Fatalf("inclusion proof of record 0 = %d %s", s, body)
	}
	if s, body := h.rest(t, "GET", "/v1/auditLogs/acct_bench/consistencyProof?fromSize=1", owner, nil); s != 200 || !strings.Contains(body, `"treeSize":"1"`) {
		t.Fatalf("GET consistencyProof = %d %s", s, body)
	}
	if s, body := h.rest(t, "GET", "/v1/auditLogs/acct_elsewhere/consistencyProof?fromSize=3", owner, nil); s != 403 || !strings.Contains(body, "RAIL_ACCOUNT_NOT_HELD") {
		t.Fatalf("consistency proof of an account the owner does not hold = %d %s", s, body)
	}
	// This server has no audit verifier key: it refuses to verify rather
	// than pass a log signed by a key it does not know.
	if s, body := h.rest(t, "POST", "/v1/auditRecords:verify", owner, map[string]any{"railAccount": "acct_bench"}); s != 400 || !strings.Contains(body, "AUDIT_VERIFIER_KEY_MISSING") {
		t.Fatalf("POST /v1/auditRecords:verify on a server with no verifier key = %d %s", s, body)
	}
	if s, body := h.rest(t, "POST", "/v1/auditRecords:verify", owner, map[string]any{"railAccount": "acct_elsewhere"}); s != 403 || !strings.Contains(body, "RAIL_ACCOUNT_NOT_HELD") {
		t.Fatalf("verify of an account the owner does not hold = %d %s", s, body)
	}
}

// TestHeldApprovedOverREST is issue 5's end-to-end flow on the real
// listeners: an agent's request is HELD, the owner approves over REST, the
// identical request is ALLOWED once, and a third gets the stored result.
func TestHeldApprovedOverREST(t *testing.T) {
	h := bareRailHarness(t)
	m := mandateFor(h)
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	applyMandateTo(t, h, m)
	owner := "Bearer " + h.ownerToken

	held := h.decide(t, refund("pi_bench", 4200, ""))
	if held.GetVerdict() != countersignv1.Verdict_VERDICT_HOLD {
		t.Fatalf("first: %s %s", held.GetVerdict(), held.GetReasonCode())
	}
	s, body := h.rest(t, "GET", "/v1/approvals?state=APPROVAL_STATE_PENDING", owner, nil)
	var list struct {
		Approvals []struct {
			ApprovalID         string `json:"approvalId"`
			Sik                string `json:"sik"`
			RequestFingerprint string `json:"requestFingerprint"`
		} `json:"approvals"`
	}
	if s != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Approvals) != 1 || list.Approvals[0].Sik != held.GetIntent().GetSik() {
		t.Fatalf("pending approvals: %d %s", s, body)
	}
	ap := list.Approvals[0]
	if s, body := h.rest(t, "POST", "/v1/approvals/"+ap.ApprovalID+":approve", owner,
		map[string]string{"requestFingerprint": ap.RequestFingerprint, "note": "looks right"}); s != 200 || !strings.Contains(body, "APPROVAL_STATE_APPROVED") {
		t.Fatalf("approve: %d %s", s, body)
	}
	// Approving twice is refused with its reason.
	if s, body := h.rest(t, "POST", "/v1/approvals/"+ap.ApprovalID+":approve", owner, map[string]string{}); s != http.StatusBadRequest || !strings.Contains(body, "APPROVAL_NOT_PENDING") {
		t.Fatalf("second approve: %d %s", s, body)
	}
	allowed := h.decide(t, refund("pi_bench", 4200, ""))
	if allowed.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("approved request: %s %s", allowed.GetVerdict(), allowed.GetReasonCode())
	}
	h.sendAndCommit(t, allowed, "pi_bench", 4200)
	third := h.decide(t, refund("pi_bench", 4200, ""))
	if third.GetReasonCode() != "duplicate_applied" || third.GetStoredResponse() == nil {
		t.Fatalf("third request: %s %s", third.GetVerdict(), third.GetReasonCode())
	}
}

// sendAndCommit does what an SDK on the native API does after an ALLOW:
// sends the stamped refund to the rail and commits the rail's answer.
func (h *allowHarness) sendAndCommit(t *testing.T, allowed *countersignv1.DecideResponse, payment string, amount int64) {
	t.Helper()
	stamp := allowed.GetStamps()["idempotency-key"]
	form := "payment_intent=" + payment + "&amount=" + strconv.FormatInt(amount, 10) + "&metadata%5Bcountersign_sik%5D=" + stamp
	req, _ := http.NewRequest(http.MethodPost, h.mockURL+"/v1/refunds", strings.NewReader(form))
	req.Header.Set("Authorization", "Bearer sk_test_mockrail")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", stamp)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+h.secret)
	cr, err := countersignv1.NewDecisionServiceClient(h.conn).Commit(ctx, &countersignv1.CommitRequest{
		RailAccount: "acct_bench", Sik: allowed.GetIntent().GetSik(), AttemptSeq: allowed.GetAttemptSeq(), BodyStamped: true,
		CommitToken: allowed.GetCommitToken(), Outcome: &countersignv1.CommitRequest_Response{Response: &countersignv1.HttpResponse{HttpStatus: int32(resp.StatusCode),
			Headers: map[string]string{"content-type": "application/json"}, Body: body}}})
	if err != nil || cr.GetIntent().GetState() != countersignv1.IntentState_INTENT_STATE_APPLIED {
		t.Fatalf("commit: %v %v (rail said %d %s)", cr, err, resp.StatusCode, body)
	}
}

// TestWebhookDeliversAppliedEvent: an owner registers a webhook over REST;
// when a refund applies, serve's dispatcher delivers intent.applied, signed
// with the secret the owner was shown once.
func TestWebhookDeliversAppliedEvent(t *testing.T) {
	h := railHarness(t)
	got := make(chan *http.Request, 8)
	bodies := make(chan []byte, 8)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
	}))
	defer recv.Close()
	// An internal address outside --webhook-allow-networks is refused.
	for _, u := range []string{"http://169.254.169.254/latest/meta-data", "http://10.0.0.5/hook", "http://[fd00::1]/"} {
		s, body := h.rest(t, "POST", "/v1/webhooks", "Bearer "+h.ownerToken, map[string]any{"url": u})
		if s != 400 || !strings.Contains(body, "WEBHOOK_ADDRESS_REFUSED") {
			t.Fatalf("webhook to %s: %d %s, want 400 WEBHOOK_ADDRESS_REFUSED", u, s, body)
		}
	}
	s, body := h.rest(t, "POST", "/v1/webhooks", "Bearer "+h.ownerToken,
		map[string]any{"url": recv.URL, "eventTypes": []string{"intent.applied"}})
	var created struct {
		SigningSecret string `json:"signingSecret"`
	}
	if s != 200 || json.Unmarshal([]byte(body), &created) != nil || created.SigningSecret == "" {
		t.Fatalf("create webhook: %d %s", s, body)
	}
	allowed := h.decide(t, refund("pi_bench", 321, ""))
	h.sendAndCommit(t, allowed, "pi_bench", 321)
	select {
	case r := <-got:
		b := <-bodies
		if r.Header.Get("Countersign-Event") != "intent.applied" || !strings.Contains(string(b), allowed.GetIntent().GetSik()) {
			t.Fatalf("delivery %v %s", r.Header, b)
		}
		if err := outbox.Verify(created.SigningSecret, r.Header.Get("Countersign-Signature"), b, time.Minute, time.Now()); err != nil {
			t.Fatalf("signature: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no webhook delivery")
	}
}

// TestRESTRefusesMembersItDoesNotKnow: a mandate posted over REST with a
// misspelled member (`budget` for `budgets`, `reversibles` in a grant) is
// refused with 400 naming it, as the YAML path refuses it; before, the
// gateway dropped it and the mandate was stored without the limit the
// owner wrote (found by a review: a 5,000.00 USD refund allowed under the
// 10.00 USD budget the owner meant).
func TestRESTRefusesMembersItDoesNotKnow(t *testing.T) {
	h := bareRailHarness(t)
	grantAccountOfAgent(t, h.store, "acct_bench", h.agentID)
	m := mandateFor(h)
	m.Grants = m.Grants[:1]
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	post := func(edit func(map[string]any)) (int, string) {
		var body map[string]any
		if err := json.Unmarshal(js, &body); err != nil {
			t.Fatal(err)
		}
		edit(body)
		return h.rest(t, http.MethodPost, "/v1/mandates", "Bearer "+h.ownerToken, body)
	}
	for name, edit := range map[string]func(map[string]any){
		"budget": func(b map[string]any) { b["budget"] = []any{map[string]any{"amount_minor": "1000", "currency": "USD"}} },
		"reversibles": func(b map[string]any) {
			b["grants"].([]any)[0].(map[string]any)["reversibles"] = true
		},
	} {
		if status, resp := post(edit); status != http.StatusBadRequest || !strings.Contains(resp, name) {
			t.Errorf("a mandate with the unknown member %q = %d %s; want 400 naming it", name, status, resp)
		}
	}
	if status, resp := post(func(map[string]any) {}); status != http.StatusOK {
		t.Fatalf("the mandate as written = %d %s", status, resp)
	}
}
