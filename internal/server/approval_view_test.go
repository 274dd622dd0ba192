package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/wait"
)

// ownerGRPC is the owner API over the server's gRPC listener, as the owner.
func ownerGRPC(h *allowHarness) (countersignv1.OwnerServiceClient, context.Context) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+h.ownerToken)
	return countersignv1.NewOwnerServiceClient(h.conn), ctx
}

// restApproval is an approval as grpc-gateway writes it (protojson: int64
// as a string, enums by name).
type restApproval struct {
	ApprovalID         string `json:"approvalId"`
	State              string `json:"state"`
	Rail               string `json:"rail"`
	RailAccount        string `json:"railAccount"`
	Sik                string `json:"sik"`
	AgentID            string `json:"agentId"`
	MandateHash        string `json:"mandateHash"`
	RequestFingerprint string `json:"requestFingerprint"`
	CanonicalRequest   string `json:"canonicalRequest"`
	ActionKind         string `json:"actionKind"`
	Subject            string `json:"subject"`
	Payee              string `json:"payee"`
	Amount             struct {
		AmountMinor string `json:"amountMinor"`
		Currency    string `json:"currency"`
	} `json:"amount"`
	HeldBy struct {
		Gate       string `json:"gate"`
		Verdict    string `json:"verdict"`
		ReasonCode string `json:"reasonCode"`
		Reason     string `json:"reason"`
	} `json:"heldBy"`
	Gates      []json.RawMessage `json:"gates"`
	ExpireTime string            `json:"expireTime"`
}

// TestApprovalShowsWhatIsApproved (issue 10 item 8): a held payout, listed
// over REST and read over gRPC, carries the action, subject, amount in
// minor units, currency, payee, the gate and reason that held it, and the
// exact canonical request its fingerprint was taken over.
func TestApprovalShowsWhatIsApproved(t *testing.T) {
	h := bareRailHarness(t)
	m := mandateFor(h)
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	hash := applyMandateTo(t, h, m)
	amount := int64(189900)
	held := h.decide(t, &countersignv1.ProposedAction{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT,
		Subject: "ba_supplier", Payee: "ba_supplier", AmountMinor: &amount, Currency: "USD"})
	if held.GetVerdict() != countersignv1.Verdict_VERDICT_HOLD {
		t.Fatalf("payout: %s %s %s", held.GetVerdict(), held.GetReasonCode(), held.GetReason())
	}
	it, _, err := h.store.GetIntent(context.Background(), ledger.Key{RailAccount: "acct_bench", SIK: held.GetIntent().GetSik()})
	if err != nil {
		t.Fatal(err)
	}

	s, body := h.rest(t, "GET", "/v1/approvals?state=APPROVAL_STATE_PENDING", "Bearer "+h.ownerToken, nil)
	var list struct {
		Approvals []restApproval `json:"approvals"`
	}
	if s != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Approvals) != 1 {
		t.Fatalf("GET /v1/approvals = %d %s", s, body)
	}
	a := list.Approvals[0]
	sum := sha256.Sum256([]byte(a.CanonicalRequest))
	for _, c := range []struct{ field, got, want string }{
		{"state", a.State, "APPROVAL_STATE_PENDING"},
		{"rail", a.Rail, "RAIL_STRIPE"},
		{"railAccount", a.RailAccount, "acct_bench"},
		{"sik", a.Sik, held.GetIntent().GetSik()},
		{"agentId", a.AgentID, h.agentID},
		{"mandateHash", a.MandateHash, hash},
		{"actionKind", a.ActionKind, "ACTION_KIND_PAYOUT"},
		{"subject", a.Subject, "ba_supplier"},
		{"payee", a.Payee, "ba_supplier"},
		{"amount.amountMinor", a.Amount.AmountMinor, "189900"},
		{"amount.currency", a.Amount.Currency, "USD"},
		{"heldBy.gate", a.HeldBy.Gate, "G3_limits"},
		{"heldBy.verdict", a.HeldBy.Verdict, "VERDICT_HOLD"},
		{"heldBy.reasonCode", a.HeldBy.ReasonCode, "approval_required"},
		{"canonicalRequest", a.CanonicalRequest, it.Canonical},
		{"requestFingerprint", a.RequestFingerprint, hex.EncodeToString(sum[:])},
	} {
		if c.got != c.want {
			t.Errorf("listed approval %s = %q, want %q", c.field, c.got, c.want)
		}
	}
	for _, w := range []string{`"action":"payout"`, `"amount_minor":189900`, `"currency":"USD"`, `"subject":"ba_supplier"`} {
		if !strings.Contains(a.CanonicalRequest, w) {
			t.Errorf("canonical request %s lacks %s", a.CanonicalRequest, w)
		}
	}
	// The agent was told the same reason (the answer may add what to do).
	if a.HeldBy.Reason == "" || !strings.HasPrefix(held.GetReason(), a.HeldBy.Reason) || !strings.Contains(a.HeldBy.Reason, "approval_required") {
		t.Errorf("heldBy.reason = %q; the agent was told %q", a.HeldBy.Reason, held.GetReason())
	}
	if len(a.Gates) == 0 || a.ExpireTime == "" {
		t.Errorf("listed approval lacks its gates or expiry: %s", body)
	}

	// gRPC GetApproval answers the same.
	client, ctx := ownerGRPC(h)
	g, err := client.GetApproval(ctx, &countersignv1.GetApprovalRequest{ApprovalId: a.ApprovalID})
	if err != nil {
		t.Fatal(err)
	}
	ga := g.GetApproval()
	if ga.GetActionKind() != countersignv1.ActionKind_ACTION_KIND_PAYOUT || ga.GetSubject() != "ba_supplier" || ga.GetPayee() != "ba_supplier" ||
		ga.GetAmount().GetAmountMinor() != 189900 || ga.GetAmount().GetCurrency() != "USD" || ga.GetRail() != countersignv1.Rail_RAIL_STRIPE ||
		ga.GetHeldBy().GetReasonCode() != "approval_required" || ga.GetCanonicalRequest() != it.Canonical ||
		ga.GetRequestFingerprint() != a.RequestFingerprint {
		t.Fatalf("GetApproval = %v", ga)
	}
}

// approveRefused approves id over gRPC and returns the refusal's message,
// failing the test if the approval went through.
func approveRefused(t *testing.T, h *allowHarness, id string) string {
	t.Helper()
	client, ctx := ownerGRPC(h)
	_, err := client.ApproveApproval(ctx, &countersignv1.ApproveApprovalRequest{ApprovalId: id})
	if err == nil {
		t.Fatalf("approval %s was approved again", id)
	}
	return status.Convert(err).Message()
}

// TestApprovalRefusalsSayWhy: approving an approval that can no longer be
// decided names why: already approved, already used, rejected, voided.
func TestApprovalRefusalsSayWhy(t *testing.T) {
	h := bareRailHarness(t)
	m := mandateFor(h)
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	hash := applyMandateTo(t, h, m)
	client, ctx := ownerGRPC(h)

	// Approved, then approved again; then used, then approved again.
	held := h.decide(t, refund("pi_bench", 4200, ""))
	ap := pendingApproval(t, h, held.GetIntent().GetSik())
	if _, err := client.ApproveApproval(ctx, &countersignv1.ApproveApprovalRequest{ApprovalId: ap.GetApprovalId()}); err != nil {
		t.Fatal(err)
	}
	if msg := approveRefused(t, h, ap.GetApprovalId()); !strings.Contains(msg, "was already approved at") || !strings.Contains(msg, "may use it once") {
		t.Errorf("second approve: %q", msg)
	}
	if r := h.decide(t, refund("pi_bench", 4200, "")); r.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("approved request: %s %s", r.GetVerdict(), r.GetReasonCode())
	}
	if msg := approveRefused(t, h, ap.GetApprovalId()); !strings.Contains(msg, "already used by the request it covers") {
		t.Errorf("approve after use: %q", msg)
	}

	// Rejected, then approved.
	held = h.decide(t, refund("pi_bench", 4201, ""))
	ap = pendingApproval(t, h, held.GetIntent().GetSik())
	if _, err := client.RejectApproval(ctx, &countersignv1.RejectApprovalRequest{ApprovalId: ap.GetApprovalId(), Note: "no"}); err != nil {
		t.Fatal(err)
	}
	if msg := approveRefused(t, h, ap.GetApprovalId()); !strings.Contains(msg, "was rejected at") || !strings.Contains(msg, "blocked for good") {
		t.Errorf("approve after reject: %q", msg)
	}

	// Voided by the mandate's revocation, then approved.
	held = h.decide(t, refund("pi_bench", 4202, ""))
	ap = pendingApproval(t, h, held.GetIntent().GetSik())
	if _, err := client.RevokeMandate(ctx, &countersignv1.RevokeMandateRequest{MandateHash: hash, Reason: "compromised"}); err != nil {
		t.Fatal(err)
	}
	if msg := approveRefused(t, h, ap.GetApprovalId()); !strings.Contains(msg, "was voided") || !strings.Contains(msg, "mandate was revoked") {
		t.Errorf("approve after void: %q", msg)
	}
}

// TestExpiredApprovalSaysExpired: an approval whose time ran out before the
// owner decided says so, with the time.
func TestExpiredApprovalSaysExpired(t *testing.T) {
	h := bareRailHarness(t)
	m := mandateFor(h)
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	m.ApprovalTtl = durationpb.New(100 * time.Millisecond)
	applyMandateTo(t, h, m)
	held := h.decide(t, refund("pi_bench", 4300, ""))
	// Listed in any state: on a busy machine the 100 ms may be over by now.
	l, err := owners(h).ListApprovals(context.Background(), &countersignv1.ListApprovalsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ap *countersignv1.Approval
	for _, a := range l.GetApprovals() {
		if a.GetSik() == held.GetIntent().GetSik() {
			ap = a
		}
	}
	if ap == nil {
		t.Fatalf("no approval for %s in %v", held.GetIntent().GetSik(), l.GetApprovals())
	}
	expires := ap.GetExpireTime().AsTime()
	// Wait for the expiry to pass on the clock the database shares.
	if !wait.Until(10*time.Second, func() bool { return time.Now().After(expires) }) {
		t.Fatalf("the clock did not pass %s", expires)
	}
	want := "approval " + ap.GetApprovalId() + " expired at " + expires.UTC().Format(time.RFC3339) + " before it was decided"
	if msg := approveRefused(t, h, ap.GetApprovalId()); !strings.Contains(msg, want) {
		t.Errorf("approve after expiry: %q, want it to contain %q", msg, want)
	}
}

// TestApprovedThenExpiredSaysExpired: the owner approved a request, but the
// approval ran out before the agent sent it again. The agent is told the
// approval expired (not that none was given), no money moves, a new
// approval is opened, and the old one, approved again, says it expired
// after it was approved.
func TestApprovedThenExpiredSaysExpired(t *testing.T) {
	h := bareRailHarness(t)
	client, ctx := ownerGRPC(h)
	// The owner must approve inside the TTL; a machine too busy for the
	// short one gets a longer one.
	for i, ttl := range []time.Duration{2 * time.Second, 10 * time.Second} {
		m := mandateFor(h)
		m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
		m.ApprovalTtl = durationpb.New(ttl)
		m.Purpose = "ttl " + ttl.String()
		applyMandateTo(t, h, m)
		amount := int64(4400 + i)
		held := h.decide(t, refund("pi_bench", amount, ""))
		ap := pendingApproval(t, h, held.GetIntent().GetSik())
		if _, err := client.ApproveApproval(ctx, &countersignv1.ApproveApprovalRequest{ApprovalId: ap.GetApprovalId()}); err != nil {
			t.Logf("approval with a %s TTL was not approved in time: %v", ttl, err)
			continue
		}
		expires := ap.GetExpireTime().AsTime()
		if !wait.Until(ttl+10*time.Second, func() bool { return time.Now().After(expires) }) {
			t.Fatalf("the clock did not pass %s", expires)
		}
		r := h.decide(t, refund("pi_bench", amount, ""))
		want := "expired at " + expires.UTC().Format(time.RFC3339) + ", before this request came back"
		if r.GetVerdict() != countersignv1.Verdict_VERDICT_HOLD || r.GetReasonCode() != "approval_expired" || !strings.Contains(r.GetReason(), want) {
			t.Fatalf("request after its approval expired: %s %s %q, want HOLD approval_expired containing %q", r.GetVerdict(), r.GetReasonCode(), r.GetReason(), want)
		}
		if fresh := pendingApproval(t, h, held.GetIntent().GetSik()); fresh.GetApprovalId() == ap.GetApprovalId() {
			t.Fatalf("no new approval was opened for the request")
		}
		if msg := approveRefused(t, h, ap.GetApprovalId()); !strings.Contains(msg, "but expired at "+expires.UTC().Format(time.RFC3339)+" before its request used it") {
			t.Errorf("approve of the expired approval: %q", msg)
		}
		return
	}
	t.Fatal("no approval could be approved inside its TTL")
}
