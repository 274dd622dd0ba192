package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

const testWebhookSecret WebhookSecret = "whsec_0123456789abcdef"

// outboxFixture is an owner with an agent, ready to have webhooks.
type outboxFixture struct {
	s     *Store
	owner string
	agent Agent
}

func newOutboxFixture(t *testing.T, owner string) outboxFixture {
	t.Helper()
	s := openTest(t)
	a, err := s.CreateAgent(context.Background(), owner, "outbox-bot")
	if err != nil {
		t.Fatal(err)
	}
	return outboxFixture{s: s, owner: owner, agent: a}
}

func (f outboxFixture) webhook(t *testing.T, owner string, types ...string) Webhook {
	t.Helper()
	w, err := f.s.CreateWebhook(context.Background(), owner, WebhookSpec{
		URL: "https://hooks.example.com/" + owner, Secret: testWebhookSecret, EventTypes: types})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// applied drives intent n of the fixture's agent to APPLIED through
// Propose and Commit, as the engine does.
func (f outboxFixture) applied(t *testing.T, n int) Key {
	t.Helper()
	ctx := context.Background()
	p := proposal(n)
	p.AgentID = f.agent.ID
	if _, err := startFirst(ctx, f.s, p); err != nil {
		t.Fatal(err)
	}
	it, err := f.s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: fmt.Sprintf("re_%d", n)})
	if err != nil || it.State != intent.Applied {
		t.Fatalf("commit = %+v, %v", it, err)
	}
	return p.Key
}

// deliveriesOf lists (webhook id, state) of an event's deliveries.
func deliveriesOf(t *testing.T, s *Store, outboxID int64) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(),
		`SELECT webhook_id || ':' || state FROM outbox_deliveries WHERE outbox_id = $1 ORDER BY webhook_id`, outboxID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOutboxEventFollowsEachInterestingTransition(t *testing.T) {
	f := newOutboxFixture(t, "own_outbox")
	ctx := context.Background()
	all := f.webhook(t, f.owner)
	heldOnly := f.webhook(t, f.owner, EventIntentHeld)
	other := f.webhook(t, "own_someone_else")
	gone := f.webhook(t, f.owner)
	if err := f.s.DeleteWebhook(ctx, f.owner, gone.ID); err != nil {
		t.Fatal(err)
	}

	// PROPOSED → AUTHORIZED → IN_FLIGHT → APPLIED: only APPLIED is an event.
	k := f.applied(t, 1)
	evs, err := f.s.EventsOf(ctx, k)
	if err != nil || len(evs) != 1 || evs[0].Type != EventIntentApplied || evs[0].OwnerID != f.owner {
		t.Fatalf("events of an applied intent = %+v, %v", evs, err)
	}
	var payload map[string]any
	if err := json.Unmarshal(evs[0].Payload, &payload); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"id": fmt.Sprint(evs[0].ID), "event": "intent.applied", "rail_account": "acct_test", "sik": k.SIK,
		"state": "APPLIED", "from_state": "IN_FLIGHT", "transition": "RAIL_APPLIED", "subject": "pi_1",
		"amount_minor": float64(1000), "currency": "USD", "agent_id": f.agent.ID, "rail_entity_id": "re_1",
		"reason": "applied by the rail", "rail": "stripe", "action": "refund", "attempt": float64(1),
	}
	for key, v := range want {
		if payload[key] != v {
			t.Errorf("payload[%q] = %v, want %v", key, payload[key], v)
		}
	}
	if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(payload["occurred_at"])); err != nil || time.Since(at) > time.Minute {
		t.Errorf("occurred_at = %v (%v)", payload["occurred_at"], err)
	}
	if got := deliveriesOf(t, f.s, evs[0].ID); !slices.Equal(got, []string{all.ID + ":pending"}) {
		t.Fatalf("deliveries of intent.applied = %v, want only the subscribed live webhook %s (not %s, %s, %s)",
			got, all.ID, heldOnly.ID, other.ID, gone.ID)
	}

	// A HOLD is an event for both the catch-all and the held-only webhook.
	p := proposal(2)
	p.AgentID = f.agent.ID
	if err := holdNew(ctx, f.s, p, ApprovalSpec{}); err != nil {
		t.Fatalf("held intent: %v", err)
	}
	evs, err = f.s.EventsOf(ctx, p.Key)
	if err != nil || len(evs) != 2 || evs[0].Type != EventIntentHeld || evs[1].Type != EventApprovalOpened {
		t.Fatalf("events of a held intent = %+v, %v; want intent.held, then approval.opened", evs, err)
	}
	wantHeld := []string{all.ID + ":pending", heldOnly.ID + ":pending"}
	slices.Sort(wantHeld)
	if got := deliveriesOf(t, f.s, evs[0].ID); !slices.Equal(got, wantHeld) {
		t.Fatalf("deliveries of intent.held = %v, want %v", got, wantHeld)
	}
	if got := deliveriesOf(t, f.s, evs[1].ID); !slices.Equal(got, []string{all.ID + ":pending"}) {
		t.Fatalf("deliveries of approval.opened = %v, want only the catch-all %s", got, all.ID)
	}

	// A rejection is intent.failed; a fingerprint mismatch ends QUARANTINED.
	cases := []struct {
		name    string
		n       int
		outcome RailOutcome
		want    []string
	}{
		{"rejected", 3, OutcomeRejected, []string{EventIntentFailed}},
		{"fingerprint mismatch", 4, OutcomeFingerprintMismatch, []string{EventIntentQuarantined}},
		{"ambiguous (UNKNOWN is no event)", 5, OutcomeAmbiguous, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := proposal(tc.n)
			p.AgentID = f.agent.ID
			if _, err := startFirst(ctx, f.s, p); err != nil {
				t.Fatal(err)
			}
			if _, err := f.s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: tc.outcome, Reason: "r"}); err != nil {
				t.Fatal(err)
			}
			evs, err := f.s.EventsOf(ctx, p.Key)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range evs {
				got = append(got, e.Type)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("events = %v, want %v", got, tc.want)
			}
		})
	}

	// An intent without an agent has no owner to tell.
	p = proposal(6)
	if _, err := startFirst(ctx, f.s, p); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_6"}); err != nil {
		t.Fatal(err)
	}
	if evs, err := f.s.EventsOf(ctx, p.Key); err != nil || len(evs) != 0 {
		t.Fatalf("events of an agentless intent = %+v, %v", evs, err)
	}
}

func TestOutboxRolledBackTransitionLeavesNoEvent(t *testing.T) {
	f := newOutboxFixture(t, "own_rollback")
	ctx := context.Background()
	w := f.webhook(t, f.owner)
	p := proposal(1)
	p.AgentID = f.agent.ID
	if _, err := startFirst(ctx, f.s, p); err != nil {
		t.Fatal(err)
	}
	errRollback := errors.New("roll back")
	var inside int
	err := f.s.InTx(ctx, func(tx *Tx) error {
		it, err := tx.lockIntent(ctx, p.Key)
		if err != nil {
			return err
		}
		if _, err := tx.transition(ctx, it, intent.RailApplied, transitionOpts{entityID: "re_1", attemptOutcome: "applied"}); err != nil {
			return err
		}
		// Inside the transaction the event and its delivery exist...
		if err := tx.tx.QueryRow(ctx, `SELECT count(*) FROM outbox o JOIN outbox_deliveries d ON d.outbox_id = o.id
			WHERE o.sik = $1 AND d.webhook_id = $2`, p.SIK, w.ID).Scan(&inside); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) || inside != 1 {
		t.Fatalf("InTx = %v, deliveries inside = %d (want the rollback and 1)", err, inside)
	}
	// ...and after the rollback neither does.
	evs, err := f.s.EventsOf(ctx, p.Key)
	if err != nil || len(evs) != 0 {
		t.Fatalf("events after a rolled-back transition = %+v, %v", evs, err)
	}
	var n int
	if err := f.s.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_deliveries`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("deliveries after a rolled-back transition = %d, %v", n, err)
	}
	// The same transition committed writes exactly one event.
	if _, err := f.s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_1"}); err != nil {
		t.Fatal(err)
	}
	if evs, err := f.s.EventsOf(ctx, p.Key); err != nil || len(evs) != 1 {
		t.Fatalf("events after the committed transition = %+v, %v", evs, err)
	}
}

// claimUntil claims as owner until it gets a delivery or the deadline passes.
func claimUntil(t *testing.T, s *Store, owner string, ttl time.Duration, within time.Duration) []Delivery {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ds, err := s.ClaimDeliveries(context.Background(), owner, ttl, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) > 0 || time.Now().After(deadline) {
			return ds
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDeliveryLeases(t *testing.T) {
	f := newOutboxFixture(t, "own_leases")
	ctx := context.Background()
	w := f.webhook(t, f.owner)
	f.applied(t, 1)

	a, err := f.s.ClaimDeliveries(ctx, "dispatcher-a", 300*time.Millisecond, 10)
	if err != nil || len(a) != 1 {
		t.Fatalf("first claim = %+v, %v", a, err)
	}
	d := a[0]
	if d.WebhookID != w.ID || d.EventType != EventIntentApplied || d.Attempt != 1 || d.Secret != testWebhookSecret ||
		d.URL != w.URL || d.ID() != fmt.Sprintf("%d-%s", d.OutboxID, w.ID) || !json.Valid(d.Payload) {
		t.Fatalf("claimed delivery = %+v", d)
	}
	if s := fmt.Sprintf("%v %+v %#v", d, d, d); strings.Contains(s, string(testWebhookSecret)) {
		t.Fatalf("a printed delivery shows its secret: %s", s)
	}
	// While A's lease lives nobody else gets the delivery.
	if b, err := f.s.ClaimDeliveries(ctx, "dispatcher-b", time.Minute, 10); err != nil || len(b) != 0 {
		t.Fatalf("claim during a live lease = %+v, %v", b, err)
	}
	// A's lease expires (A died mid-delivery): B takes over, as attempt 2.
	b := claimUntil(t, f.s, "dispatcher-b", time.Minute, 10*time.Second)
	if len(b) != 1 || b[0].ID() != d.ID() || b[0].Attempt != 2 || b[0].Lease == d.Lease {
		t.Fatalf("claim after the lease expired = %+v", b)
	}
	// A, back from the dead, can mark nothing.
	if err := f.s.MarkDelivered(ctx, d, "dispatcher-a"); !errors.Is(err, ErrDeliveryLeaseLost) {
		t.Fatalf("MarkDelivered by the expired lease holder = %v", err)
	}
	if err := f.s.MarkFailed(ctx, d, "dispatcher-a", DeliveryFailure{Dead: true}); !errors.Is(err, ErrDeliveryLeaseLost) {
		t.Fatalf("MarkFailed by the expired lease holder = %v", err)
	}
	// Another owner presenting B's token cannot mark either.
	if err := f.s.MarkDelivered(ctx, b[0], "dispatcher-a"); !errors.Is(err, ErrDeliveryLeaseLost) {
		t.Fatalf("MarkDelivered by a stranger = %v", err)
	}
	if err := f.s.MarkDelivered(ctx, b[0], "dispatcher-b"); err != nil {
		t.Fatal(err)
	}
	st, err := f.s.GetDelivery(ctx, f.owner, d.OutboxID, d.WebhookID)
	if err != nil || st.State != "delivered" || st.Attempts != 2 || st.DeliveredAt == nil || st.LeaseOwner != "" {
		t.Fatalf("delivery after the mark = %+v, %v", st, err)
	}
	// Delivered is final: nothing to claim, and a second mark fails.
	if c, err := f.s.ClaimDeliveries(ctx, "dispatcher-c", time.Minute, 10); err != nil || len(c) != 0 {
		t.Fatalf("claim after delivery = %+v, %v", c, err)
	}
	if err := f.s.MarkDelivered(ctx, b[0], "dispatcher-b"); !errors.Is(err, ErrDeliveryLeaseLost) {
		t.Fatalf("second MarkDelivered = %v", err)
	}
	if _, err := f.s.GetDelivery(ctx, "own_other", d.OutboxID, d.WebhookID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another owner's GetDelivery = %v", err)
	}

	// The same owner name re-claiming after its own lease expired holds a
	// new lease; the stale claim's token is refused.
	k := f.applied(t, 2)
	evs, _ := f.s.EventsOf(ctx, k)
	first := claimUntil(t, f.s, "dispatcher-a", 200*time.Millisecond, time.Second)
	second := claimUntil(t, f.s, "dispatcher-a", time.Minute, 10*time.Second)
	if len(first) != 1 || len(second) != 1 || first[0].OutboxID != evs[0].ID || second[0].OutboxID != evs[0].ID {
		t.Fatalf("claims = %+v then %+v", first, second)
	}
	if err := f.s.MarkDelivered(ctx, first[0], "dispatcher-a"); !errors.Is(err, ErrDeliveryLeaseLost) {
		t.Fatalf("mark with a stale token of the same owner = %v", err)
	}
	// A failure schedules a retry; it is not due before its time.
	if err := f.s.MarkFailed(ctx, second[0], "dispatcher-a", DeliveryFailure{Status: 503, Error: "HTTP 503", Retry: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if c, err := f.s.ClaimDeliveries(ctx, "dispatcher-c", time.Minute, 10); err != nil || len(c) != 0 {
		t.Fatalf("claim before the retry is due = %+v, %v", c, err)
	}
	st, err = f.s.GetDelivery(ctx, f.owner, second[0].OutboxID, second[0].WebhookID)
	if err != nil || st.State != "pending" || st.LastStatus != 503 || st.LastError != "HTTP 503" ||
		time.Until(st.NextAttemptAt) < 50*time.Minute {
		t.Fatalf("delivery after a failure = %+v, %v", st, err)
	}
}

func TestConcurrentDispatchersNeverShareADelivery(t *testing.T) {
	f := newOutboxFixture(t, "own_concurrent")
	ctx := context.Background()
	f.webhook(t, f.owner)
	f.webhook(t, f.owner, EventIntentApplied)
	const events = 12
	for i := range events {
		f.applied(t, 100+i)
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("d%d", w)
			for {
				ds, err := f.s.ClaimDeliveries(ctx, owner, time.Minute, 3)
				if err != nil {
					errs <- err
					return
				}
				if len(ds) == 0 {
					return
				}
				for _, d := range ds {
					mu.Lock()
					prev, dup := seen[d.ID()]
					seen[d.ID()] = owner
					mu.Unlock()
					if dup {
						errs <- fmt.Errorf("%s claimed by %s and %s", d.ID(), prev, owner)
					}
					if err := f.s.MarkDelivered(ctx, d, owner); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(seen) != 2*events {
		t.Fatalf("%d deliveries claimed, want %d", len(seen), 2*events)
	}
}

func TestDeadLetterListAndReplay(t *testing.T) {
	f := newOutboxFixture(t, "own_dead")
	ctx := context.Background()
	w := f.webhook(t, f.owner)
	for i := range 3 {
		f.applied(t, i+1)
	}
	ds, err := f.s.ClaimDeliveries(ctx, "d", time.Minute, 10)
	if err != nil || len(ds) != 3 {
		t.Fatalf("claim = %+v, %v", ds, err)
	}
	for _, d := range ds {
		if err := f.s.MarkFailed(ctx, d, "d", DeliveryFailure{Status: 500, Error: "HTTP 500: boom", Dead: true}); err != nil {
			t.Fatal(err)
		}
	}
	// Dead letters are never claimed.
	if c, err := f.s.ClaimDeliveries(ctx, "d", time.Minute, 10); err != nil || len(c) != 0 {
		t.Fatalf("claim of dead letters = %+v, %v", c, err)
	}

	// Paged one at a time, oldest first, only to their owner.
	var got []DeadLetter
	tok := ""
	for range 10 {
		page, next, err := f.s.ListDeadLetters(ctx, f.owner, DeadLetterQuery{PageSize: 1, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if tok = next; tok == "" {
			break
		}
	}
	if len(got) != 3 {
		t.Fatalf("dead letters = %+v", got)
	}
	for i, dl := range got {
		if dl.ID() != ds[i].ID() || dl.State != DeadLetterDead || dl.Attempts != 1 || dl.LastStatus != 500 ||
			dl.LastError != "HTTP 500: boom" || dl.EventType != EventIntentApplied || dl.ReplayedAt != nil || dl.DeadAt.IsZero() {
			t.Fatalf("dead letter %d = %+v", i, dl)
		}
	}
	if other, _, err := f.s.ListDeadLetters(ctx, "own_other", DeadLetterQuery{}); err != nil || len(other) != 0 {
		t.Fatalf("another owner's dead letters = %+v, %v", other, err)
	}
	if _, _, err := f.s.ListDeadLetters(ctx, f.owner, DeadLetterQuery{PageToken: "%%%"}); !errors.Is(err, ErrOutboxInvalid) {
		t.Fatalf("bad page token = %v", err)
	}

	// Replay: back to pending with attempts reset, claimable at once.
	target := got[1]
	if _, err := f.s.ReplayDeadLetter(ctx, "own_other", target.OutboxID, target.WebhookID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("replay by another owner = %v", err)
	}
	if _, err := f.s.ReplayDeadLetter(ctx, f.owner, target.OutboxID+1000, target.WebhookID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("replay of nothing = %v", err)
	}
	dl, err := f.s.ReplayDeadLetter(ctx, f.owner, target.OutboxID, target.WebhookID)
	if err != nil || dl.State != DeadLetterReplayed || dl.Attempts != 0 || dl.ReplayedAt == nil {
		t.Fatalf("replay = %+v, %v", dl, err)
	}
	again, err := f.s.ReplayDeadLetter(ctx, f.owner, target.OutboxID, target.WebhookID)
	if err != nil || again.State != DeadLetterReplayed || !again.ReplayedAt.Equal(*dl.ReplayedAt) {
		t.Fatalf("second replay = %+v, %v (want the first replay, unchanged)", again, err)
	}
	c, err := f.s.ClaimDeliveries(ctx, "d2", time.Minute, 10)
	if err != nil || len(c) != 1 || c[0].ID() != target.ID() || c[0].Attempt != 1 {
		t.Fatalf("claim after replay = %+v, %v", c, err)
	}
	if err := f.s.MarkDelivered(ctx, c[0], "d2"); err != nil {
		t.Fatal(err)
	}
	dead, _, err := f.s.ListDeadLetters(ctx, f.owner, DeadLetterQuery{State: DeadLetterDead})
	if err != nil || len(dead) != 2 || slices.ContainsFunc(dead, func(d DeadLetter) bool { return d.ID() == target.ID() }) {
		t.Fatalf("dead letters still dead = %+v, %v", dead, err)
	}
	replayed, _, err := f.s.ListDeadLetters(ctx, f.owner, DeadLetterQuery{State: DeadLetterReplayed, WebhookID: w.ID})
	if err != nil || len(replayed) != 1 || replayed[0].ID() != target.ID() {
		t.Fatalf("replayed dead letters = %+v, %v", replayed, err)
	}

	// Deleting the webhook drops its dead letters: nothing left to list or replay.
	if err := f.s.DeleteWebhook(ctx, f.owner, w.ID); err != nil {
		t.Fatal(err)
	}
	if all, _, err := f.s.ListDeadLetters(ctx, f.owner, DeadLetterQuery{}); err != nil || len(all) != 0 {
		t.Fatalf("dead letters of a deleted webhook = %+v, %v", all, err)
	}
	if _, err := f.s.ReplayDeadLetter(ctx, f.owner, dead[0].OutboxID, dead[0].WebhookID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("replay to a deleted webhook = %v", err)
	}
}

func TestWebhookLifecycle(t *testing.T) {
	f := newOutboxFixture(t, "own_hooks")
	ctx := context.Background()
	invalid := []struct {
		name string
		spec WebhookSpec
	}{
		{"relative url", WebhookSpec{URL: "/hook", Secret: testWebhookSecret}},
		{"ftp url", WebhookSpec{URL: "ftp://example.com/", Secret: testWebhookSecret}},
		{"short secret", WebhookSpec{URL: "https://example.com/", Secret: "short"}},
		{"unknown event", WebhookSpec{URL: "https://example.com/", Secret: testWebhookSecret, EventTypes: []string{"intent.aplied"}}},
		{"duplicate event", WebhookSpec{URL: "https://example.com/", Secret: testWebhookSecret, EventTypes: []string{"intent.held", "intent.held"}}},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.s.CreateWebhook(ctx, f.owner, tc.spec); !errors.Is(err, ErrOutboxInvalid) {
				t.Fatalf("CreateWebhook = %v, want ErrOutboxInvalid", err)
			}
		})
	}

	var made []Webhook
	for i := range 3 {
		w, err := f.s.CreateWebhook(ctx, f.owner, WebhookSpec{URL: fmt.Sprintf("https://example.com/%d", i),
			Secret: testWebhookSecret, EventTypes: []string{EventIntentHeld}, Description: "hook"})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, w)
	}
	f.webhook(t, "own_other")
	var listed []string
	tok := ""
	for range 10 {
		page, next, err := f.s.ListWebhooks(ctx, f.owner, 2, tok)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range page {
			if w.OwnerID != f.owner || !slices.Equal(w.EventTypes, []string{EventIntentHeld}) || w.Description != "hook" {
				t.Fatalf("listed webhook = %+v", w)
			}
			listed = append(listed, w.ID)
		}
		if tok = next; tok == "" {
			break
		}
	}
	if want := []string{made[0].ID, made[1].ID, made[2].ID}; !slices.Equal(listed, want) {
		t.Fatalf("listed %v, want %v", listed, want)
	}

	if err := f.s.DeleteWebhook(ctx, "own_other", made[1].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete by another owner = %v", err)
	}
	if err := f.s.DeleteWebhook(ctx, f.owner, made[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := f.s.DeleteWebhook(ctx, f.owner, made[1].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete = %v", err)
	}
	page, _, err := f.s.ListWebhooks(ctx, f.owner, 0, "")
	if err != nil || len(page) != 2 || page[0].ID != made[0].ID || page[1].ID != made[2].ID {
		t.Fatalf("webhooks after delete = %+v, %v", page, err)
	}

	// The database keeps a webhook as created: no edit, no undelete, no removal.
	for _, stmt := range []string{
		`UPDATE webhooks SET url = 'https://evil.example.com/' WHERE id = $1`,
		`UPDATE webhooks SET deleted_at = NULL WHERE id = $1`,
		`DELETE FROM webhooks WHERE id = $1`,
	} {
		id := made[0].ID
		if strings.Contains(stmt, "deleted_at = NULL") {
			id = made[1].ID
		}
		if _, err := f.s.pool.Exec(ctx, stmt, id); err == nil {
			t.Errorf("%s was accepted", stmt)
		}
	}
}

func TestDeleteWebhookDropsPendingDeliveries(t *testing.T) {
	f := newOutboxFixture(t, "own_drop")
	ctx := context.Background()
	w := f.webhook(t, f.owner)
	keep := f.webhook(t, f.owner)
	k := f.applied(t, 1)
	evs, err := f.s.EventsOf(ctx, k)
	if err != nil || len(evs) != 1 {
		t.Fatalf("events = %+v, %v", evs, err)
	}
	if err := f.s.DeleteWebhook(ctx, f.owner, w.ID); err != nil {
		t.Fatal(err)
	}
	want := []string{w.ID + ":dropped", keep.ID + ":pending"}
	slices.Sort(want)
	if got := deliveriesOf(t, f.s, evs[0].ID); !slices.Equal(got, want) {
		t.Fatalf("deliveries after delete = %v, want %v", got, want)
	}
	ds, err := f.s.ClaimDeliveries(ctx, "d", time.Minute, 10)
	if err != nil || len(ds) != 1 || ds[0].WebhookID != keep.ID {
		t.Fatalf("claim = %+v, %v", ds, err)
	}
	// Delivered and dropped are final, whatever writes to the table.
	if _, err := f.s.pool.Exec(ctx, `UPDATE outbox_deliveries SET state = 'pending' WHERE webhook_id = $1`, w.ID); err == nil {
		t.Fatal("a dropped delivery went back to pending")
	}
	if _, err := f.s.pool.Exec(ctx, `UPDATE outbox SET payload = '{}' WHERE id = $1`, evs[0].ID); err == nil {
		t.Fatal("an event was edited")
	}
}

func TestParseDeliveryID(t *testing.T) {
	cases := []struct {
		id      string
		outbox  int64
		webhook string
		ok      bool
	}{
		{"17-whk_abcdefgh", 17, "whk_abcdefgh", true},
		{DeliveryID(9, "whk_zzzzzzzz"), 9, "whk_zzzzzzzz", true},
		{"17", 0, "", false},
		{"x-whk_abcdefgh", 0, "", false},
		{"0-whk_abcdefgh", 0, "", false},
		{"17-abcdefgh", 0, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			o, w, err := ParseDeliveryID(tc.id)
			if (err == nil) != tc.ok || o != tc.outbox || w != tc.webhook {
				t.Fatalf("ParseDeliveryID(%q) = %d, %q, %v", tc.id, o, w, err)
			}
			if !tc.ok && !errors.Is(err, ErrOutboxInvalid) {
				t.Fatalf("error %v is not ErrOutboxInvalid", err)
			}
		})
	}
}
