package api

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
)

// TestOwnerAPIVerifyAuditNeedsAKey: a server with no audit verifier key
// refuses VerifyAudit (FailedPrecondition, AUDIT_VERIFIER_KEY_MISSING)
// rather than answer ok for a log re-sealed with any key; with the key, the
// forgery is named. Found by a review: a replica started without
// --audit-signing-key answered ok=true, signatures_checked=false.
func TestOwnerAPIVerifyAuditNeedsAKey(t *testing.T) {
	ctx := context.Background()
	store, s, _, _, _, _ := auditFixture(t)
	forger, _ := testAuditKey(t) // the real key's name, another key
	_, verifier := testAuditKey(t)
	if _, err := store.Seal(ctx, forger); err != nil {
		t.Fatal(err)
	}
	req := &countersignv1.VerifyAuditRequest{RailAccount: acct, MaxUnsealedAge: durationpb.New(0)}
	v, err := s.VerifyAudit(as("own_a"), req)
	st, _ := status.FromError(err)
	reason := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
		}
	}
	if st.Code() != codes.FailedPrecondition || reason != "AUDIT_VERIFIER_KEY_MISSING" || !strings.Contains(st.Message(), "--audit-verifier-key") || v.GetOk() {
		t.Fatalf("verify on a server with no key = %v, %v (reason %q); want FailedPrecondition AUDIT_VERIFIER_KEY_MISSING", v, err, reason)
	}
	// An owner who does not hold the account learns nothing more than before.
	if _, err := s.VerifyAudit(as("own_c"), req); code(err) != codes.PermissionDenied {
		t.Fatalf("verify of an account not held, no key = %v, want PermissionDenied", err)
	}
	s.WithAuditVerifier(verifier)
	v, err = s.VerifyAudit(as("own_a"), req)
	if err != nil || v.GetOk() || !v.GetSignaturesChecked() || !hasProblem(v, string(ledger.AuditUntrustedSigner), "", "not signed by the trusted key") {
		t.Fatalf("verify of a forged log with the key = %v, %v; want not ok, untrusted-signer", v, err)
	}
}
