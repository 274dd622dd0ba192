package ledger

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// An owner has at most MaxWebhooksPerOwner live webhooks, counted in the
// creating transaction: concurrent creates cannot exceed it, another owner
// is not affected, and deleting one frees its place.
func TestWebhooksAreCappedPerOwner(t *testing.T) {
	f := newOutboxFixture(t, "own_cap")
	ctx := context.Background()
	var hooks []Webhook
	for range MaxWebhooksPerOwner {
		hooks = append(hooks, f.webhook(t, f.owner))
	}
	spec := WebhookSpec{URL: "https://hooks.example.com/more", Secret: testWebhookSecret}
	if _, err := f.s.CreateWebhook(ctx, f.owner, spec); !errors.Is(err, ErrWebhookLimit) {
		t.Fatalf("webhook %d: %v, want ErrWebhookLimit", MaxWebhooksPerOwner+1, err)
	}
	f.webhook(t, "own_other") // another owner is not affected
	if err := f.s.DeleteWebhook(ctx, f.owner, hooks[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.CreateWebhook(ctx, f.owner, spec); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	if _, err := f.s.CreateWebhook(ctx, f.owner, spec); !errors.Is(err, ErrWebhookLimit) {
		t.Fatalf("beyond the cap again: %v, want ErrWebhookLimit", err)
	}

	// Racing creates of one owner: exactly the cap succeeds.
	const racers = 3 * MaxWebhooksPerOwner
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() { _, errs[i] = f.s.CreateWebhook(ctx, "own_race", spec) })
	}
	wg.Wait()
	created := 0
	for _, err := range errs {
		switch {
		case err == nil:
			created++
		case !errors.Is(err, ErrWebhookLimit):
			t.Fatalf("racing create: %v", err)
		}
	}
	var live int
	if err := f.s.pool.QueryRow(ctx, `SELECT count(*) FROM webhooks WHERE owner_id = 'own_race' AND deleted_at IS NULL`).Scan(&live); err != nil {
		t.Fatal(err)
	}
	if created != MaxWebhooksPerOwner || live != MaxWebhooksPerOwner {
		t.Fatalf("racing creates: %d created, %d live; want %d", created, live, MaxWebhooksPerOwner)
	}
}

// A claim shares its batch among owners: owner B's backlog of older
// deliveries (more than a batch) does not keep owner A's newer event out
// of the next claim; an owner alone fills the batch; every delivery is
// claimed exactly once in the end.
func TestClaimSharesTheBatchAmongOwners(t *testing.T) {
	ctx := context.Background()
	b := newOutboxFixture(t, "own_b")
	a := b.otherOwner(t, "own_a")
	for range MaxWebhooksPerOwner {
		b.webhook(t, b.owner)
	}
	hookA := a.webhook(t, a.owner)
	const batch = 16
	for n := range 4 { // 40 deliveries of B's, all older than A's
		b.applied(t, 100+n)
	}
	a.applied(t, 200)

	seen := map[string]int{}
	ds, err := b.s.ClaimDeliveries(ctx, "d1", time.Minute, batch)
	if err != nil {
		t.Fatal(err)
	}
	perOwner := map[string]int{}
	for _, d := range ds {
		perOwner[d.OwnerID]++
		seen[d.ID()]++
	}
	if len(ds) != batch || perOwner["own_a"] != 1 || perOwner["own_b"] != batch-1 {
		t.Fatalf("first claim: %d deliveries, per owner %v; want A's one and %d of B's", len(ds), perOwner, batch-1)
	}
	// Claims come back in event order: A's, the newest, is last.
	if ds[len(ds)-1].WebhookID != hookA.ID {
		t.Fatalf("last of the claim is %s, want A's delivery", ds[len(ds)-1].ID())
	}
	// The rest, until none is left: each once.
	for range 10 {
		more, err := b.s.ClaimDeliveries(ctx, "d2", time.Minute, batch)
		if err != nil {
			t.Fatal(err)
		}
		if len(more) == 0 {
			break
		}
		for _, d := range more {
			seen[d.ID()]++
		}
	}
	if len(seen) != 4*MaxWebhooksPerOwner+1 {
		t.Fatalf("claimed %d distinct deliveries, want %d", len(seen), 4*MaxWebhooksPerOwner+1)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("delivery %s claimed %d times", id, n)
		}
	}
}

// claimScan is how far into each webhook's deliveries (pending or dead,
// oldest event first) the claim once looked for due ones, before migration
// 00040.
const claimScan = 256

// A webhook keeps its share of every claim however many of its deliveries
// are dead letters or still backing off: its new due delivery is claimed
// at once beside another owner's older backlog (more than the claims
// below take), instead of waiting until that whole backlog is drained.
// Found by a review: with claimScan dead letters the webhook's share was
// lost for good.
func TestClaimShareSurvivesDeadLettersAndBackoff(t *testing.T) {
	cases := []struct {
		name string
		park string // what the webhook's older deliveries become
	}{
		{"dead letters", `UPDATE outbox_deliveries SET state = 'dead', dead_at = now() WHERE webhook_id = $1`},
		{"backing off", `UPDATE outbox_deliveries SET next_attempt_at = now() + interval '1 hour', attempts = 3 WHERE webhook_id = $1`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b := newOutboxFixture(t, "own_b")
			hookB := b.webhook(t, b.owner)
			for n := range claimScan + 8 {
				b.applied(t, 1000+n)
			}
			if _, err := b.s.pool.Exec(ctx, tc.park, hookB.ID); err != nil {
				t.Fatal(err)
			}
			a := b.otherOwner(t, "own_a")
			for range MaxWebhooksPerOwner {
				a.webhook(t, a.owner)
			}
			for n := range 10 { // 100 of A's deliveries, all older than B's new one
				a.applied(t, 5000+n)
			}
			kB := b.applied(t, 9000)
			evs, err := b.s.EventsOf(ctx, kB)
			if err != nil || len(evs) != 1 {
				t.Fatalf("events of B's new intent: %+v, %v", evs, err)
			}

			const batch = 16
			ds, err := b.s.ClaimDeliveries(ctx, "d1", time.Minute, batch)
			if err != nil {
				t.Fatal(err)
			}
			perOwner := map[string]int{}
			for _, d := range ds {
				perOwner[d.OwnerID]++
				if d.OwnerID == "own_b" && d.ID() != DeliveryID(evs[0].ID, hookB.ID) {
					t.Fatalf("claimed B's %s, which is %s", d.ID(), tc.name)
				}
			}
			if len(ds) != batch || perOwner["own_b"] != 1 || perOwner["own_a"] != batch-1 {
				t.Fatalf("first claim: %d deliveries, per owner %v; want B's new one beside %d of A's older ones", len(ds), perOwner, batch-1)
			}
		})
	}
}

// A capped claim takes no more of an owner's deliveries than the cap
// leaves room for beside those the dispatcher holds already, and gives the
// rest of the batch to the other owners.
func TestClaimCapsWhatOneOwnerHolds(t *testing.T) {
	ctx := context.Background()
	b := newOutboxFixture(t, "own_b")
	a := b.otherOwner(t, "own_a")
	for range MaxWebhooksPerOwner {
		b.webhook(t, b.owner)
	}
	a.webhook(t, a.owner)
	for n := range 4 { // 40 of B's deliveries
		b.applied(t, 100+n)
	}
	for n := range 3 { // 3 of A's
		a.applied(t, 200+n)
	}
	cases := []struct {
		name         string
		oc           OwnerCap
		limit        int
		wantA, wantB int
	}{
		{"B holds none", OwnerCap{Max: 4}, 16, 3, 4},
		{"B holds 3", OwnerCap{Max: 4, Held: map[string]int{"own_b": 3}}, 16, 3, 1},
		{"B holds its cap", OwnerCap{Max: 4, Held: map[string]int{"own_b": 4}}, 16, 3, 0},
		{"A holds 2: B's turns come first", OwnerCap{Max: 4, Held: map[string]int{"own_a": 2}}, 4, 1, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := b.s.ClaimDeliveriesCapped(ctx, "d1", time.Minute, tc.limit, tc.oc)
			if err != nil {
				t.Fatal(err)
			}
			perOwner := map[string]int{}
			for _, d := range ds {
				perOwner[d.OwnerID]++
			}
			if perOwner["own_a"] != tc.wantA || perOwner["own_b"] != tc.wantB {
				t.Fatalf("claimed per owner %v; want A %d, B %d", perOwner, tc.wantA, tc.wantB)
			}
			// Give them back: each case starts from the same outbox.
			if _, err := b.s.pool.Exec(ctx, `UPDATE outbox_deliveries SET lease_owner = NULL, lease_expires_at = NULL, attempts = 0 WHERE state = 'pending'`); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// otherOwner is a fixture on f's ledger for another owner, with an agent
// of its own.
func (f outboxFixture) otherOwner(t *testing.T, owner string) outboxFixture {
	t.Helper()
	agent, err := f.s.CreateAgent(context.Background(), owner, owner+"'s bot")
	if err != nil {
		t.Fatal(err)
	}
	return outboxFixture{s: f.s, owner: owner, agent: agent}
}
