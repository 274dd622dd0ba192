package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ownerauth"
)

// TestAnotherOwnersMandateIsAnsweredAsOneThatDoesNotExist: GetMandate,
// GetMandateUsage and RevokeMandate answer another owner's mandate hash
// exactly as a hash that exists nowhere, over gRPC and REST (found by an
// attacker's-eye review: the message named the hash only when it existed
// nowhere, telling an owner which hashes exist).
func TestAnotherOwnersMandateIsAnsweredAsOneThatDoesNotExist(t *testing.T) {
	h := railHarness(t)
	ctx := context.Background()
	other, _, _, err := ownerauth.Bootstrap(ctx, h.store, "another owner", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, otherAgent := newAgentCredential(t, h.store, other.ID, "another owner's agent")
	theirs := grantAll(t, h.store, otherAgent, "acct_bench")
	sum := sha256.Sum256([]byte("a mandate nobody made"))
	nowhere := hex.EncodeToString(sum[:])
	oc := countersignv1.NewOwnerServiceClient(h.conn)
	owner := as(h.ownerToken)
	rpcs := []struct {
		name string
		call func(hash string) error
	}{
		{"GetMandate", func(hash string) error {
			_, err := oc.GetMandate(owner, &countersignv1.GetMandateRequest{MandateHash: hash})
			return err
		}},
		{"GetMandateUsage", func(hash string) error {
			_, err := oc.GetMandateUsage(owner, &countersignv1.GetMandateUsageRequest{MandateHash: hash})
			return err
		}},
		{"RevokeMandate", func(hash string) error {
			_, err := oc.RevokeMandate(owner, &countersignv1.RevokeMandateRequest{MandateHash: hash, Reason: "probe"})
			return err
		}},
	}
	for _, rpc := range rpcs {
		t.Run(rpc.name, func(t *testing.T) {
			errTheirs, errNowhere := rpc.call(theirs), rpc.call(nowhere)
			if status.Code(errTheirs) != codes.NotFound || errorReason(errTheirs) != "NOT_FOUND" {
				t.Fatalf("%s of another owner's mandate = %v, want NotFound", rpc.name, errTheirs)
			}
			got := strings.ReplaceAll(status.Convert(errTheirs).Message(), theirs, "<hash>")
			want := strings.ReplaceAll(status.Convert(errNowhere).Message(), nowhere, "<hash>")
			if status.Code(errNowhere) != codes.NotFound || errorReason(errNowhere) != "NOT_FOUND" || got != want {
				t.Fatalf("%s tells another owner's mandate (%q) from one that does not exist (%v)", rpc.name, got, errNowhere)
			}
		})
	}
	rest := []struct{ name, method, path string }{
		{"GET /v1/mandates/{hash}", http.MethodGet, "/v1/mandates/%s"},
		{"GET /v1/mandates/{hash}/usage", http.MethodGet, "/v1/mandates/%s/usage"},
		{"POST /v1/mandates/{hash}:revoke", http.MethodPost, "/v1/mandates/%s:revoke"},
	}
	for _, r := range rest {
		t.Run(r.name, func(t *testing.T) {
			call := func(hash string) (int, string) {
				var body any
				if r.method == http.MethodPost {
					body = map[string]string{"reason": "probe"}
				}
				s, b := h.rest(t, r.method, strings.Replace(r.path, "%s", hash, 1), "Bearer "+h.ownerToken, body)
				return s, strings.ReplaceAll(b, hash, "<hash>")
			}
			sTheirs, bTheirs := call(theirs)
			sNowhere, bNowhere := call(nowhere)
			if sTheirs != http.StatusNotFound || sNowhere != sTheirs || bNowhere != bTheirs {
				t.Fatalf("another owner's mandate: %d %s; none: %d %s; want one 404", sTheirs, bTheirs, sNowhere, bNowhere)
			}
		})
	}
	if m, err := h.store.GetMandate(ctx, theirs); err != nil || m.RevokedAt != nil {
		t.Fatalf("another owner's mandate after the calls: %+v, %v; want it in force", m, err)
	}
}
