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
	agentA, err := b.s.CreateAgent(ctx, "own_a", "owner A's bot")
	if err != nil {
		t.Fatal(err)
	}
	a := outboxFixture{s: b.s, owner: "own_a", agent: agentA}
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
