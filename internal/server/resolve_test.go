package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ownerauth"
)

// TestOwnerResolvesAQuarantinedIntent: a QUARANTINED intent leaves only by
// its owner's resolution over the owner API. The agent cannot resolve its
// own quarantined refund (with its credential, over gRPC or REST), another
// owner finds nothing, the owner's "not applied" cannot outweigh the
// rail's applied answer, and once resolved applied the agent's identical
// request is answered from the ledger without reaching the rail.
func TestOwnerResolvesAQuarantinedIntent(t *testing.T) {
	h := railHarness(t, noReconcileDelay)
	ctx := context.Background()
	const amount = 400
	// Quarantined as TestReportedAppliedAfterConfirmedAbsentQuarantines
	// does: proven absent, then the rail applies the late request.
	allowed := h.confirmAbsent(t, amount)
	sik := allowed.GetIntent().GetSik()
	sent, body, err := h.sendStamped(ctx, allowed, amount)
	if err != nil || sent != http.StatusOK {
		t.Fatalf("send = %d %s, %v", sent, body, err)
	}
	if cr, err := h.decisions().Commit(as(h.secret), reportedApplied(allowed, string(body))); err != nil ||
		cr.GetIntent().GetState() != countersignv1.IntentState_INTENT_STATE_QUARANTINED {
		t.Fatalf("late applied = %v, %v; want QUARANTINED", cr, err)
	}
	entity := h.mock.Journal().EffectsOn("pi_bench")[0].EntityID
	path := "/v1/intents/acct_bench/" + sik + ":resolve"
	owners := countersignv1.NewOwnerServiceClient(h.conn)
	resolve := func(res countersignv1.IntentResolution, entity, note string) *countersignv1.ResolveIntentRequest {
		return &countersignv1.ResolveIntentRequest{RailAccount: "acct_bench", Sik: sik, Resolution: res, RailEntityId: entity, Note: note}
	}
	applied := resolve(countersignv1.IntentResolution_INTENT_RESOLUTION_APPLIED, entity, "the refund is in the dashboard")

	t.Run("the agent cannot resolve it", func(t *testing.T) {
		_, err := owners.ResolveIntent(as(h.secret), applied)
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("agent's ResolveIntent = %v, want Unauthenticated", err)
		}
		if s, body := h.rest(t, "POST", path, "Bearer "+h.secret, map[string]any{"resolution": "INTENT_RESOLUTION_NOT_APPLIED", "note": "x"}); s != http.StatusUnauthorized {
			t.Fatalf("agent's REST resolve = %d %s, want 401", s, body)
		}
	})
	t.Run("another owner finds nothing", func(t *testing.T) {
		other, otherToken, _, err := ownerauth.Bootstrap(ctx, h.store, "second owner", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.GrantRailAccount(ctx, "acct_bench", other.ID); err != nil {
			t.Fatal(err)
		}
		_, err = owners.ResolveIntent(as(otherToken), applied)
		if status.Code(err) != codes.NotFound {
			t.Fatalf("another owner's ResolveIntent = %v, want NotFound", err)
		}
	})
	t.Run("bad input is refused precisely", func(t *testing.T) {
		for _, c := range []struct {
			name string
			body map[string]any
			want string
		}{
			{"applied without the entity", map[string]any{"resolution": "INTENT_RESOLUTION_APPLIED", "note": "found it"}, "rail_entity_id is required"},
			{"not applied naming an entity", map[string]any{"resolution": "INTENT_RESOLUTION_NOT_APPLIED", "railEntityId": "re_1", "note": "x"}, "rail_entity_id is required"},
			{"no resolution", map[string]any{"note": "x"}, "resolution"},
			{"no note", map[string]any{"resolution": "INTENT_RESOLUTION_NOT_APPLIED"}, "note"},
			{"a note that reorders what the agents read", map[string]any{"resolution": "INTENT_RESOLUTION_NOT_APPLIED", "note": "refund \u202e00.994"}, "note"},
			{"an entity id with spaces", map[string]any{"resolution": "INTENT_RESOLUTION_APPLIED", "railEntityId": "re 1", "note": "x"}, "rail_entity_id"},
		} {
			t.Run(c.name, func(t *testing.T) {
				s, body := h.rest(t, "POST", path, "Bearer "+h.ownerToken, c.body)
				if s != http.StatusBadRequest || !strings.Contains(body, c.want) {
					t.Fatalf("resolve = %d %s, want 400 naming %q", s, body, c.want)
				}
			})
		}
	})
	t.Run("the rail's applied outweighs the owner's not applied", func(t *testing.T) {
		s, body := h.rest(t, "POST", path, "Bearer "+h.ownerToken, map[string]any{"resolution": "INTENT_RESOLUTION_NOT_APPLIED", "note": "I see nothing"})
		if s != http.StatusBadRequest || !strings.Contains(body, "INTENT_NOT_RESOLVABLE") || !strings.Contains(body, entity) {
			t.Fatalf("not applied = %d %s, want 400 INTENT_NOT_RESOLVABLE naming %s", s, body, entity)
		}
		if it, _ := h.intentState(t, sik); it.State != intent.Quarantined {
			t.Fatalf("intent %s after a refused resolution", it.State)
		}
	})

	s, got := h.rest(t, "POST", path, "Bearer "+h.ownerToken, map[string]any{"resolution": "INTENT_RESOLUTION_APPLIED", "railEntityId": entity, "note": "the refund is in the dashboard"})
	if s != http.StatusOK || !strings.Contains(got, "INTENT_STATE_APPLIED") {
		t.Fatalf("resolve applied = %d %s", s, got)
	}
	it, _ := h.intentState(t, sik)
	if it.State != intent.Applied || it.RailEntityID != entity || !strings.Contains(it.Reason, h.ownerID) {
		t.Fatalf("intent after resolution = %+v", it)
	}
	r := h.decide(t, refund("pi_bench", amount, ""))
	if r.GetVerdict() == countersignv1.Verdict_VERDICT_ALLOW || r.GetReasonCode() != "duplicate_applied" || !strings.Contains(r.GetReason(), "resolved by the owner") {
		t.Fatalf("the agent's identical request after the resolution = %s %s %q", r.GetVerdict(), r.GetReasonCode(), r.GetReason())
	}
	if n := len(h.mock.Journal().EffectsOn("pi_bench")); n != 1 {
		t.Fatalf("rail effects = %d, want 1", n)
	}
	if _, err := owners.ResolveIntent(as(h.ownerToken), applied); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a second resolution = %v, want FailedPrecondition", err)
	}
}
