package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// TestServeVerifiesTheAuditWithAVerifierKeyOnly: a replica that does not
// seal (no --audit-signing-key) verifies with --audit-verifier-key alone,
// and with neither key the owner API refuses to verify rather than answer
// ok for a log signed by anyone. Found by a review: such a replica
// answered ok=true, signatures_checked=false.
func TestServeVerifiesTheAuditWithAVerifierKeyOnly(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	_, pub, _, err := audit.WriteKeyPair(t.TempDir(), "serve.audit")
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSuffix(pub, ".pub") + ".key"
	otherDir := t.TempDir()
	if _, _, _, err := audit.WriteKeyPair(otherDir, "serve.audit"); err != nil { // same name, another key
		t.Fatal(err)
	}
	otherPub := filepath.Join(otherDir, "serve.audit.pub")
	signer, _, err := audit.LoadSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	store, err := ledger.Open(ctx, url, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	owner, token, _, err := ownerauth.Bootstrap(ctx, store, "owner", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.GrantRailAccount(ctx, "acct_seq", owner.ID); err != nil {
		t.Fatal(err)
	}
	proposeAudited(t, store, 2)
	if _, err := store.Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}
	store.Close()

	cases := []struct {
		name          string
		verifierKey   string
		wantCode      codes.Code
		wantSigned    bool
		wantUntrusted bool
		wantREST      string // in the REST answer's status line and body
	}{
		{"neither key", "", codes.FailedPrecondition, false, false, "400 AUDIT_VERIFIER_KEY_MISSING"},
		{"the signing key's verifier key only", pub, codes.OK, true, false, `200 "signaturesChecked":true`},
		{"another key's verifier key only", otherPub, codes.OK, true, true, `200 "kind":"untrusted-signer"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := startWith(t, url, func(c *config.Config) { c.AuditVerifierKey = tc.verifierKey }, slog.New(slog.NewTextHandler(io.Discard, nil)))
			cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), 30*time.Second)
			defer cancel()
			if got := restVerify(t, h.http, token); !strings.HasPrefix(got, strings.Fields(tc.wantREST)[0]) || !strings.Contains(got, strings.Fields(tc.wantREST)[1]) {
				t.Fatalf("POST /v1/auditRecords:verify = %s; want %s", got, tc.wantREST)
			}
			v, err := countersignv1.NewOwnerServiceClient(h.conn).VerifyAudit(cctx,
				&countersignv1.VerifyAuditRequest{RailAccount: "acct_seq", MaxUnsealedAge: durationpb.New(0)})
			if status.Code(err) != tc.wantCode {
				t.Fatalf("VerifyAudit = %v, %v; want code %s", v, err, tc.wantCode)
			}
			if err != nil {
				if !strings.Contains(status.Convert(err).Message(), "no audit verifier key") {
					t.Fatalf("the refusal does not say why: %v", err)
				}
				return
			}
			untrusted := false
			for _, p := range v.GetProblems() {
				untrusted = untrusted || p.GetKind() == string(ledger.AuditUntrustedSigner)
			}
			if v.GetSignaturesChecked() != tc.wantSigned || untrusted != tc.wantUntrusted || v.GetCheckpointsChecked() != 1 || (untrusted && v.GetOk()) {
				t.Fatalf("VerifyAudit = %v; want signatures checked %v, untrusted-signer %v", v, tc.wantSigned, tc.wantUntrusted)
			}
		})
	}
}

// restVerify asks the REST gateway to verify acct_seq's log (no unsealed
// age bound) and returns the status code and body.
func restVerify(t *testing.T, base, token string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/auditRecords:verify", strings.NewReader(`{"railAccount":"acct_seq","maxUnsealedAge":"0s"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(resp.StatusCode) + " " + string(body)
}
