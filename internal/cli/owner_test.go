package cli

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// fakeOwner answers the approval RPCs with fixed approvals, as the owner
// API would, and records the token and requests it saw.
type fakeOwner struct {
	countersignv1.UnimplementedOwnerServiceServer
	approvals []*countersignv1.Approval
	listState countersignv1.ApprovalState
	approved  *countersignv1.ApproveApprovalRequest
	token     string
}

func (f *fakeOwner) ListApprovals(ctx context.Context, r *countersignv1.ListApprovalsRequest) (*countersignv1.ListApprovalsResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.token, f.listState = strings.Join(md.Get("authorization"), ","), r.GetState()
	return &countersignv1.ListApprovalsResponse{Approvals: f.approvals}, nil
}

func (f *fakeOwner) GetApproval(_ context.Context, r *countersignv1.GetApprovalRequest) (*countersignv1.GetApprovalResponse, error) {
	for _, a := range f.approvals {
		if a.GetApprovalId() == r.GetApprovalId() {
			return &countersignv1.GetApprovalResponse{Approval: a}, nil
		}
	}
	return nil, status.Error(codes.NotFound, "ledger: not found: approval "+r.GetApprovalId())
}

func (f *fakeOwner) ApproveApproval(_ context.Context, r *countersignv1.ApproveApprovalRequest) (*countersignv1.ApproveApprovalResponse, error) {
	f.approved = r
	if r.GetApprovalId() == "apr_usedusedused" {
		return nil, status.Error(codes.FailedPrecondition, "ledger: the approval can no longer be decided: approval apr_usedusedused was approved at 2026-03-01T11:00:00Z and already used by the request it covers")
	}
	a := f.approvals[0]
	a.State = countersignv1.ApprovalState_APPROVAL_STATE_APPROVED
	return &countersignv1.ApproveApprovalResponse{Approval: a}, nil
}

func startFakeOwner(t *testing.T, f countersignv1.OwnerServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	countersignv1.RegisterOwnerServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func heldApprovals() []*countersignv1.Approval {
	expires := timestamppb.New(time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC))
	held := &countersignv1.GateResult{Gate: "G3_limits", Verdict: countersignv1.Verdict_VERDICT_HOLD, ReasonCode: "approval_required",
		Reason: "Mandate b01a6e7ddaf6 is approval_required: the owner must approve this exact request."}
	return []*countersignv1.Approval{
		{ApprovalId: "apr_payoutpayout", State: countersignv1.ApprovalState_APPROVAL_STATE_PENDING, Rail: countersignv1.Rail_RAIL_STRIPE,
			RailAccount: "acct_1", Sik: "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", AgentId: "agt_bench", MandateHash: strings.Repeat("b", 64),
			RequestFingerprint: strings.Repeat("f", 64), ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, Subject: "ba_supplier",
			Payee: "ba_supplier", Amount: &countersignv1.Money{AmountMinor: 189900, Currency: "USD"}, HeldBy: held,
			Gates: []*countersignv1.GateResult{held}, ExpireTime: expires, CreateTime: expires,
			CanonicalRequest: `{"action":"payout","amount_minor":189900,"currency":"USD","subject":"ba_supplier"}`,
			Labels:           map[string]string{"metadata[ticket]": "T-77", "description": "weekly\x1b[2J"}, LabelsDigest: strings.Repeat("d", 64)},
		{ApprovalId: "apr_refundrefund", State: countersignv1.ApprovalState_APPROVAL_STATE_PENDING, Rail: countersignv1.Rail_RAIL_STRIPE,
			RailAccount: "acct_1", AgentId: "agt_bench", ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, Subject: "pi_yen",
			Amount: &countersignv1.Money{AmountMinor: 1500, Currency: "JPY"}, HeldBy: held, ExpireTime: expires},
	}
}

// TestApprovalsListAndGet: the CLI's approval tables show what is approved,
// in major units with the code, and the request the approval is bound to.
func TestApprovalsListAndGet(t *testing.T) {
	f := &fakeOwner{approvals: heldApprovals()}
	addr := startFakeOwner(t, f)
	flags := []string{"--server", addr, "--owner-token", "cso_test"}

	r := runCLI(t, "", append([]string{"approvals", "list"}, flags...)...)
	if r.err != nil {
		t.Fatalf("approvals list: %v\n%s", r.err, r.errOut)
	}
	lines := strings.Split(strings.TrimRight(r.out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("approvals list printed %d lines, want a header and 2:\n%s", len(lines), r.out)
	}
	for _, w := range []string{"APPROVAL", "ACTION", "SUBJECT", "AMOUNT", "PAYEE", "HELD BY", "WHY HELD"} {
		if !strings.Contains(lines[0], w) {
			t.Errorf("header lacks %s: %q", w, lines[0])
		}
	}
	for _, w := range []string{"apr_payoutpayout", "PENDING", "payout", "ba_supplier", "1,899.00 USD", "G3_limits", "approval_required"} {
		if !strings.Contains(lines[1], w) {
			t.Errorf("payout row lacks %q: %q", w, lines[1])
		}
	}
	for _, w := range []string{"apr_refundrefund", "refund", "pi_yen", "1,500 JPY"} {
		if !strings.Contains(lines[2], w) {
			t.Errorf("refund row lacks %q: %q", w, lines[2])
		}
	}
	if strings.Contains(r.out, "189900") {
		t.Errorf("the table shows minor units:\n%s", r.out)
	}
	if f.token != "Bearer cso_test" || f.listState != countersignv1.ApprovalState_APPROVAL_STATE_PENDING {
		t.Errorf("list sent token %q, state %s", f.token, f.listState)
	}
	if r := runCLI(t, "", append([]string{"approvals", "list", "--state", "all"}, flags...)...); r.err != nil || f.listState != countersignv1.ApprovalState_APPROVAL_STATE_UNSPECIFIED {
		t.Errorf("list --state all: %v, state %s", r.err, f.listState)
	}
	if r := runCLI(t, "", append([]string{"approvals", "list", "--state", "maybe"}, flags...)...); r.err == nil || !strings.Contains(r.err.Error(), "--state must be one of") {
		t.Errorf("list --state maybe: %v", r.err)
	}

	r = runCLI(t, "", append([]string{"approvals", "get", "apr_payoutpayout"}, flags...)...)
	if r.err != nil {
		t.Fatalf("approvals get: %v", r.err)
	}
	for _, w := range []string{
		"approval      apr_payoutpayout",
		"rail account  stripe acct_1",
		"action        payout",
		"subject       ba_supplier",
		"amount        1,899.00 USD (189900 minor units)",
		"payee         ba_supplier",
		"held by       G3_limits approval_required",
		"why held      Mandate b01a6e7ddaf6 is approval_required",
		"fingerprint   " + strings.Repeat("f", 64),
		`request       {"action":"payout","amount_minor":189900,"currency":"USD","subject":"ba_supplier"}`,
		`labels        "description"="weekly\x1b[2J" "metadata[ticket]"="T-77"`, // quoted: no escape reaches the terminal
		"labels hash   " + strings.Repeat("d", 64),
	} {
		if !strings.Contains(r.out, w) {
			t.Errorf("approvals get lacks %q:\n%s", w, r.out)
		}
	}
}

// TestApprovalsApprove: approve passes the fingerprint the owner reviewed
// and names what was approved; a refusal prints the server's sentence.
func TestApprovalsApprove(t *testing.T) {
	f := &fakeOwner{approvals: heldApprovals()}
	flags := []string{"--server", startFakeOwner(t, f), "--owner-token", "cso_test"}
	r := runCLI(t, "", append([]string{"approvals", "approve", "apr_payoutpayout", "--fingerprint", strings.Repeat("f", 64), "--note", "ok"}, flags...)...)
	if r.err != nil || r.out != "apr_payoutpayout APPROVED: payout of 1,899.00 USD to ba_supplier\n" {
		t.Fatalf("approve = %q, %v", r.out, r.err)
	}
	if f.approved.GetRequestFingerprint() != strings.Repeat("f", 64) || f.approved.GetNote() != "ok" {
		t.Errorf("approve sent %v", f.approved)
	}
	r = runCLI(t, "", append([]string{"approvals", "approve", "apr_usedusedused"}, flags...)...)
	if r.err == nil || strings.Contains(r.err.Error(), "rpc error") || !strings.Contains(r.err.Error(), "already used by the request it covers") {
		t.Fatalf("approve of a used approval: %v", r.err)
	}
}
