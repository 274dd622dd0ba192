package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/testing/wait"
)

// An approval that can no longer be decided says why: expired (before or
// after the owner approved it), already used, rejected, voided, or already
// approved.
func TestNotDecidable(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	expires := now.Add(time.Hour)
	approvedAt := now.Add(-time.Hour)
	expiredAt := expires.Add(time.Minute)
	for _, tc := range []struct {
		name    string
		state   string
		expires time.Time
		decided *time.Time
		want    string // "" when it can be decided
	}{
		{"pending", "pending", expires, nil, ""},
		{"pending past its expiry", "pending", now, nil, "approval apr_1 expired at 2026-03-01T12:00:00Z before it was decided"},
		{"already approved", "approved", expires, &approvedAt, "approval apr_1 was already approved at 2026-03-01T11:00:00Z; the identical request may use it once, until 2026-03-01T13:00:00Z"},
		{"used", "used", expires, &approvedAt, "approval apr_1 was approved at 2026-03-01T11:00:00Z and already used by the request it covers; an approval is used once"},
		{"rejected", "rejected", expires, &approvedAt, "approval apr_1 was rejected at 2026-03-01T11:00:00Z; its request is blocked for good"},
		{"expired undecided", "expired", expires, &expiredAt, "approval apr_1 expired at 2026-03-01T13:00:00Z before it was decided"},
		{"expired after approval", "expired", expires, &approvedAt, "approval apr_1 was approved at 2026-03-01T11:00:00Z but expired at 2026-03-01T13:00:00Z before its request used it"},
		{"void", "void", expires, &approvedAt, "approval apr_1 was voided: its agent or mandate was revoked, its request was blocked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := notDecidable(Approval{ID: "apr_1", State: tc.state, ExpiresAt: tc.expires, DecidedAt: tc.decided}, now)
			if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
				t.Fatalf("notDecidable = %q, want it to start with %q", got, tc.want)
			}
		})
	}
}

// An owner reading approvals sees one whose time ran out as expired at
// once, not as pending until a decision marks it: the console's queue of
// pending approvals must never offer one that can no longer be approved.
func TestOwnerReadsAnExpiredApprovalAsExpired(t *testing.T) {
	ctx := context.Background()
	f := newOutboxFixture(t, "own_expiry")
	hold := func(n int, ttl time.Duration) Approval {
		t.Helper()
		p := proposal(n)
		p.AgentID = f.agent.ID
		if err := holdNew(ctx, f.s, p, ApprovalSpec{TTL: ttl}); err != nil {
			t.Fatalf("held intent: %v", err)
		}
		as, err := f.s.ListApprovals(ctx, f.owner, "", "", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.SIK == p.SIK {
				return a
			}
		}
		t.Fatalf("no approval for intent %d", n)
		return Approval{}
	}
	short := hold(1, 50*time.Millisecond)
	long := hold(2, time.Hour)
	ids := func(state string) []string {
		as, err := f.s.ListApprovals(ctx, f.owner, state, "", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range as {
			out = append(out, a.ID)
		}
		return out
	}
	if !wait.Until(10*time.Second, func() bool { return slices.Equal(ids("pending"), []string{long.ID}) }) {
		t.Fatalf("pending approvals = %v once %s ran out, want only %s", ids("pending"), short.ID, long.ID)
	}
	if got := ids("expired"); !slices.Equal(got, []string{short.ID}) {
		t.Fatalf("expired approvals = %v, want [%s]", got, short.ID)
	}
	if a, err := f.s.GetApproval(ctx, f.owner, short.ID); err != nil || a.State != "expired" {
		t.Fatalf("GetApproval(%s) = %q, %v; want expired", short.ID, a.State, err)
	}
	if _, err := f.s.Approve(ctx, f.owner, short.ID, "", "too late"); !errors.Is(err, ErrApprovalState) {
		t.Fatalf("approving the expired approval: %v, want ErrApprovalState", err)
	}
}

// An approval covers its request's labels: reopening it for the same labels
// keeps it; for other labels voids it and opens one for them (one live
// approval per intent); and the database refuses to rewrite the labels an
// approval was opened for.
func TestApprovalLabelsAreItsBinding(t *testing.T) {
	ctx := context.Background()
	f := newOutboxFixture(t, "own_labels")
	p := proposal(1)
	p.AgentID = f.agent.ID
	var it Intent
	open := func(labels string) {
		t.Helper()
		if err := f.s.InTx(ctx, func(tx *Tx) error {
			if it.SIK == "" {
				var err error
				if it, _, err = tx.CreateIntent(ctx, p.NewIntent); err != nil {
					return err
				}
				if it, err = tx.Transition(ctx, it, intent.GatesHeld, TransitionOpts{Reason: "needs approval"}); err != nil {
					return err
				}
			}
			return tx.OpenApproval(ctx, it, ApprovalSpec{Labels: labels})
		}); err != nil {
			t.Fatal(err)
		}
	}
	states := func() (out []string) {
		as, err := f.s.ListApprovals(ctx, f.owner, "", "", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			out = append(out, a.State+" "+a.Labels)
		}
		slices.Sort(out)
		return out
	}
	open(`{"metadata[ticket]":"T-77"}`)
	open(`{"metadata[ticket]":"T-77"}`)
	if got := states(); !slices.Equal(got, []string{`pending {"metadata[ticket]":"T-77"}`}) {
		t.Fatalf("approvals = %v, want one pending for T-77", got)
	}
	open(`{"metadata[ticket]":"T-77 4242"}`)
	if got := states(); !slices.Equal(got, []string{`pending {"metadata[ticket]":"T-77 4242"}`, `void {"metadata[ticket]":"T-77"}`}) {
		t.Fatalf("approvals = %v, want T-77 void and T-77 4242 pending", got)
	}
	open("")
	if got := states(); !slices.Contains(got, "pending {}") {
		t.Fatalf("approvals = %v, want one pending with no labels", got)
	}
	if _, err := f.s.pool.Exec(ctx, `UPDATE approvals SET labels = '{}' WHERE labels <> '{}'`); err == nil || !strings.Contains(err.Error(), "bound to its request") {
		t.Fatalf("rewriting an approval's labels: %v, want the guard's refusal", err)
	}
}

// TestPendingApprovalsAreBounded: with ApprovalSpec.MaxPending, an agent
// holds at most that many approvals pending; one more is refused with
// ErrTooManyPendingApprovals and writes nothing, keeping a live approval
// opens none (and is never refused), and an owner's decision makes room.
// Concurrent openings take turns, so the bound is exact.
func TestPendingApprovalsAreBounded(t *testing.T) {
	ctx := context.Background()
	f := newOutboxFixture(t, "own_bound")
	const max = 3
	hold := func(n int) error {
		p := proposal(n)
		p.AgentID = f.agent.ID
		return f.s.InTx(ctx, func(tx *Tx) error {
			it, created, err := tx.CreateIntent(ctx, p.NewIntent)
			if err != nil {
				return err
			}
			if created {
				if it, err = tx.Transition(ctx, it, intent.GatesHeld, TransitionOpts{Reason: "needs approval"}); err != nil {
					return err
				}
			} else if it, err = tx.LockIntent(ctx, p.Key); err != nil {
				return err
			}
			return tx.OpenApproval(ctx, it, ApprovalSpec{MaxPending: max})
		})
	}
	pending := func() int {
		t.Helper()
		var n int
		if err := f.s.pool.QueryRow(ctx, pendingApprovalsSQL, f.agent.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Ten at once: exactly max open.
	errs := make(chan error, 10)
	for i := range 10 {
		go func() { errs <- hold(200 + i) }()
	}
	refused := 0
	for range 10 {
		switch err := <-errs; {
		case errors.Is(err, ErrTooManyPendingApprovals):
			refused++
		case err != nil:
			t.Fatal(err)
		}
	}
	if refused != 10-max || pending() != max {
		t.Fatalf("%d refused, %d pending; want %d refused, %d pending", refused, pending(), 10-max, max)
	}
	var intents int
	if err := f.s.pool.QueryRow(ctx, `SELECT count(*) FROM intents WHERE agent_id = $1`, f.agent.ID).Scan(&intents); err != nil || intents != max {
		t.Fatalf("%d intents (%v): a refused opening must leave none behind", intents, err)
	}
	// The same request again keeps its approval: not refused at the bound.
	as, err := f.s.ListApprovals(ctx, f.owner, "", "", "", 100)
	if err != nil || len(as) != max {
		t.Fatalf("approvals %v, %v", as, err)
	}
	var again int
	for i := range 10 {
		if proposal(200+i).SIK == as[0].SIK {
			again = 200 + i
		}
	}
	if err := hold(again); err != nil {
		t.Fatalf("the held request again: %v", err)
	}
	// The owner rejects one: room for one more, and only one.
	if _, err := f.s.Reject(ctx, f.owner, as[0].ID, "no"); err != nil {
		t.Fatal(err)
	}
	if err := hold(300); err != nil {
		t.Fatalf("after a rejection: %v", err)
	}
	if err := hold(301); !errors.Is(err, ErrTooManyPendingApprovals) {
		t.Fatalf("past the bound again: %v", err)
	}
}

// TestApprovalReplacementsCountedPerAgentAndLabels: an intent's approval
// is replaced by one of other labels at most MaxReplacedApprovals times;
// what is counted is the agent's own replacements for other labels (found
// by a review: voids by another agent of the owner, or an approval
// re-opened under the mandate that replaced its own, were counted too,
// and blocked an honest request with the labels the owner was asked
// about).
func TestApprovalReplacementsCountedPerAgentAndLabels(t *testing.T) {
	ctx := context.Background()
	f := newOutboxFixture(t, "own_relabels")
	other, err := f.s.CreateAgent(ctx, f.owner, "sibling bot")
	if err != nil {
		t.Fatal(err)
	}
	p := proposal(1)
	p.AgentID = f.agent.ID
	var it Intent
	open := func(agent, labels, mandate string, ttl time.Duration) error {
		return f.s.InTx(ctx, func(tx *Tx) error {
			if it.SIK == "" {
				var err error
				if it, _, err = tx.CreateIntent(ctx, p.NewIntent); err != nil {
					return err
				}
				if it, err = tx.Transition(ctx, it, intent.GatesHeld, TransitionOpts{Reason: "needs approval"}); err != nil {
					return err
				}
			}
			return tx.OpenApproval(ctx, it, ApprovalSpec{AgentID: agent, Labels: labels, MandateHash: mandate, TTL: ttl})
		})
	}
	labels := func(i int) string { return fmt.Sprintf(`{"ticket": "T-%d"}`, i) }
	const m1, m2 = "m1", "m2"
	for i := 0; i <= MaxReplacedApprovals; i++ {
		if err := open(f.agent.ID, labels(i), m1, time.Hour); err != nil {
			t.Fatalf("opening %d: %v", i, err)
		}
	}
	if err := open(f.agent.ID, labels(99), m1, time.Hour); !errors.Is(err, ErrApprovalReplacedTooOften) {
		t.Fatalf("a replacement past the bound = %v; want ErrApprovalReplacedTooOften", err)
	}
	// The same labels under the mandate that replaced the first: not a
	// replacement for other labels.
	if err := open(f.agent.ID, labels(MaxReplacedApprovals), m2, 2*time.Second); err != nil {
		t.Fatalf("the same labels under a new mandate = %v", err)
	}
	// Once that one has run out, a sibling agent of the owner opens its
	// own, and changes its labels: its replacements are its own.
	if !wait.Until(20*time.Second, func() bool {
		live := true
		err := f.s.InTx(ctx, func(tx *Tx) error {
			var err error
			_, live, err = tx.LiveApproval(ctx, it.Key) // marks one that ran out expired
			return err
		})
		return err == nil && !live
	}) {
		t.Fatal("the approval never ran out")
	}
	for i := range 3 {
		if err := open(other.ID, labels(200+i), m2, time.Hour); err != nil {
			t.Fatalf("the sibling's approval %d: %v", i, err)
		}
	}
	var mine, theirs int
	if err := f.s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE agent_id = $2), count(*) FILTER (WHERE agent_id = $3) FROM approvals WHERE sik = $1 AND state = 'void'`,
		it.SIK, f.agent.ID, other.ID).Scan(&mine, &theirs); err != nil {
		t.Fatal(err)
	}
	if mine < MaxReplacedApprovals || theirs != 2 {
		t.Fatalf("voided approvals: %d of the first agent, %d of the sibling; want at least %d and 2", mine, theirs, MaxReplacedApprovals)
	}
}
