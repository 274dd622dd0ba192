package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
)

// refundWith is r.refund() with the body's label members set to labels
// (form-encoded pairs, in the order given).
func (r *rig) refundWith(labels string) Request {
	req := r.refund()
	if labels != "" {
		req.Body = []byte(string(req.Body) + "&" + labels)
	}
	return req
}

type approvalRow struct{ id, owner, state, labels string }

// approvalRows lists the rig's approvals, oldest first.
func (r *rig) approvalRows(t *testing.T) []approvalRow {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id, owner_id, state, labels FROM approvals ORDER BY created_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (approvalRow, error) {
		var a approvalRow
		return a, row.Scan(&a.id, &a.owner, &a.state, &a.labels)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (r *rig) approveLive(t *testing.T) {
	t.Helper()
	for _, a := range r.approvalRows(t) {
		if a.state == "pending" {
			if _, err := r.store.Approve(context.Background(), a.owner, a.id, "", "ok"); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no pending approval to approve")
}

func expect(t *testing.T, out Outcome, v Verdict, code string) {
	t.Helper()
	if out.Verdict != v || out.ReasonCode != code {
		t.Fatalf("decision = %s %s (%s); want %s %s", out.Verdict, out.ReasonCode, out.Reason, v, code)
	}
}

// TestApprovalCoversTheLabels: the owner approves a refund whose metadata
// says T-77; the identical refund with a card number in that metadata is
// the same intent (the SIK leaves labels out) but not the approved request:
// it is held again, the first approval is voided, and the new approval
// shows the owner the text. Only a request with exactly the approved
// labels, in any order, uses an approval.
func TestApprovalCoversTheLabels(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) { m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED })
	ctx := context.Background()
	const approved, smuggled = "metadata[ticket]=T-77&metadata[order]=9", "metadata[ticket]=T-77+4242424242424242&metadata[order]=9"

	first := r.e.Decide(ctx, r.refundWith(approved))
	expect(t, first, Hold, "approval_required")
	r.approveLive(t)

	changed := r.e.Decide(ctx, r.refundWith(smuggled))
	expect(t, changed, Hold, "approval_labels_changed")
	if changed.Intent == nil || changed.Intent.SIK != first.Intent.SIK {
		t.Fatalf("changed labels made intent %+v, not %+v: labels must stay out of the SIK", changed.Intent, first.Intent)
	}
	if strings.Contains(changed.Reason, "4242") {
		t.Errorf("the refusal repeats the smuggled text: %s", changed.Reason)
	}
	if _, atts := r.attempts(t, changed.Intent); len(atts) != 0 {
		t.Fatalf("the changed request made %d attempts under the old approval", len(atts))
	}
	rows := r.approvalRows(t)
	if len(rows) != 2 || rows[0].state != "void" || rows[1].state != "pending" ||
		rows[0].labels != `{"metadata[order]":"9","metadata[ticket]":"T-77"}` || !strings.Contains(rows[1].labels, "T-77 4242424242424242") {
		t.Fatalf("approvals = %+v; want the approved one void and a pending one with the changed labels", rows)
	}
	// The originally approved request has no approval any more either: it
	// is held again, and its new approval replaces the pending one.
	expect(t, r.e.Decide(ctx, r.refundWith(approved)), Hold, "approval_required")
	if rows := r.approvalRows(t); len(rows) != 3 || rows[1].state != "void" || rows[2].state != "pending" {
		t.Fatalf("approvals = %+v; want two void and one pending", rows)
	}

	r.approveLive(t)
	again := r.e.Decide(ctx, r.refundWith("metadata[order]=9&metadata[ticket]=T-77")) // the approved labels, reordered
	expect(t, again, Allow, "allowed")
	if _, atts := r.attempts(t, again.Intent); len(atts) != 1 {
		t.Fatalf("attempts = %d, want 1", len(atts))
	}
	if rows := r.approvalRows(t); rows[len(rows)-1].state != "used" {
		t.Fatalf("approvals = %+v; want the last one used", rows)
	}
}

// TestFreeTextPolicy: free_text refuse blocks a request carrying free
// text, naming the member, and lets one without it pass; hold holds it for
// the owner, whose approval of those labels lets it go.
func TestFreeTextPolicy(t *testing.T) {
	ctx := context.Background()
	t.Run("refuse", func(t *testing.T) {
		r := newRig(t, func(m *countersignv1.Mandate) { m.FreeText = countersignv1.FreeText_FREE_TEXT_REFUSE })
		out := r.e.Decide(ctx, r.refundWith("metadata[ticket]=T-77"))
		expect(t, out, Block, "free_text_refused")
		if !strings.Contains(out.Reason, "metadata[ticket]") || out.Intent != nil {
			t.Fatalf("refusal %q (intent %+v) does not name the member, or left an intent", out.Reason, out.Intent)
		}
		expect(t, r.e.Decide(ctx, r.refundWith("reason=duplicate")), Allow, "allowed") // a closed label is not free text
	})
	t.Run("hold", func(t *testing.T) {
		r := newRig(t, func(m *countersignv1.Mandate) { m.FreeText = countersignv1.FreeText_FREE_TEXT_HOLD })
		expect(t, r.e.Decide(ctx, r.refundWith("metadata[ticket]=T-77")), Hold, "free_text_held")
		if rows := r.approvalRows(t); len(rows) != 1 || rows[0].labels != `{"metadata[ticket]":"T-77"}` {
			t.Fatalf("approvals = %+v; want one showing the text", rows)
		}
		r.approveLive(t)
		expect(t, r.e.Decide(ctx, r.refundWith("metadata[ticket]=T-78")), Hold, "free_text_held")
		r.approveLive(t)
		expect(t, r.e.Decide(ctx, r.refundWith("metadata[ticket]=T-78")), Allow, "allowed")
	})
	t.Run("allow is today's behaviour", func(t *testing.T) {
		r := newRig(t)
		expect(t, r.e.Decide(ctx, r.refundWith("metadata[ticket]=T-77")), Allow, "allowed")
	})
}

// TestRefusedFreeTextLeavesTheHeldIntent: free text a mandate refuses is
// the request's fault, not the action's: the injected copy of a held refund
// with a card number in its metadata is refused without touching the held
// intent, which the owner can still approve for the honest request.
func TestRefusedFreeTextLeavesTheHeldIntent(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
		m.FreeText = countersignv1.FreeText_FREE_TEXT_REFUSE
	})
	ctx := context.Background()
	held := r.e.Decide(ctx, r.refund())
	expect(t, held, Hold, "approval_required")
	expect(t, r.e.Decide(ctx, r.refundWith("metadata[note]=4242424242424242")), Block, "free_text_refused")
	if it, _ := r.attempts(t, held.Intent); it.State != intent.Held {
		t.Fatalf("the refused copy moved the held intent to %s", it.State)
	}
	r.approveLive(t)
	expect(t, r.e.Decide(ctx, r.refund()), Allow, "allowed")
}

// TestApprovalReplacementsAreBounded: each re-send of a held request with
// other labels voids its approval and opens another, keeping the voided
// row; an intent's approval is replaced at most ledger.MaxReplacedApprovals
// times (found by a review: fresh metadata at the agent's decision rate
// stored a 28 KB row each time). The next replacement is refused, writing
// nothing, and the owner's pending approval stays; the same labels are
// still held as before.
func TestApprovalReplacementsAreBounded(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) { m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED })
	ctx := context.Background()
	labels := func(i int) string { return fmt.Sprintf("metadata[ticket]=T-%d", i) }
	expect(t, r.e.Decide(ctx, r.refundWith(labels(0))), Hold, "approval_required")
	for i := 1; i <= ledger.MaxReplacedApprovals; i++ {
		expect(t, r.e.Decide(ctx, r.refundWith(labels(i))), Hold, "approval_required")
	}
	refused := r.e.Decide(ctx, r.refundWith(labels(ledger.MaxReplacedApprovals+1)))
	expect(t, refused, Block, ReasonApprovalReplacedTooOften)
	rows := r.approvalRows(t)
	if len(rows) != ledger.MaxReplacedApprovals+1 {
		t.Fatalf("%d approvals after the refusal; want %d", len(rows), ledger.MaxReplacedApprovals+1)
	}
	last := rows[len(rows)-1]
	if last.state != "pending" || !strings.Contains(last.labels, fmt.Sprintf("T-%d", ledger.MaxReplacedApprovals)) {
		t.Fatalf("the live approval = %+v; want the last one held, still pending", last)
	}
	// The request the owner is asked about is held as before, and its
	// approval used once given.
	expect(t, r.e.Decide(ctx, r.refundWith(labels(ledger.MaxReplacedApprovals))), Hold, "approval_required")
	r.approveLive(t)
	expect(t, r.e.Decide(ctx, r.refundWith(labels(ledger.MaxReplacedApprovals))), Allow, "allowed")
}

// Each approval opened is an event of its own (approval.opened) naming the
// approval and its binding: intent.held is written once, when the intent
// enters HELD, so the approval opened when the same request came with
// other labels had no event, and an integration reviewing holds from its
// webhooks could not tell what it was asked to approve (found by a review).
func TestEachApprovalOpenedIsAnEvent(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) { m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED })
	ctx := context.Background()
	first := r.e.Decide(ctx, r.refundWith("metadata[ticket]=T-77"))
	expect(t, first, Hold, "approval_required")
	expect(t, r.e.Decide(ctx, r.refundWith("metadata[ticket]=T-78")), Hold, "approval_required")
	evs, err := r.store.EventsOf(ctx, ledger.Key{RailAccount: first.Intent.RailAccount, SIK: first.Intent.SIK})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if want := []string{ledger.EventIntentHeld, ledger.EventApprovalOpened, ledger.EventApprovalOpened}; !slices.Equal(types, want) {
		t.Fatalf("events = %v, want %v", types, want)
	}
	rows := r.approvalRows(t)
	if len(rows) != 2 {
		t.Fatalf("approvals = %+v, want two", rows)
	}
	for i, e := range evs[1:] {
		var p map[string]any
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{
			"event": "approval.opened", "approval_id": rows[i].id, "labels_digest": rail.LabelsDigest(rows[i].labels),
			"sik": first.Intent.SIK, "subject": "pi_1", "action": "refund", "state": "HELD",
		}
		for k, v := range want {
			if p[k] != v {
				t.Errorf("approval.opened %d: %s = %v, want %v", i, k, p[k], v)
			}
		}
		if fp, _ := p["request_fingerprint"].(string); len(fp) != 64 {
			t.Errorf("approval.opened %d: request_fingerprint %q", i, fp)
		}
	}
}
