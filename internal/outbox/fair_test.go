package outbox

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// Owner B's webhooks answer slowly and B's events are older and more than
// a batch; owner A's event, written after, still goes out in the very next
// pass: the claim shares each batch among owners instead of serving the
// oldest deliveries of whichever owner wrote most.
func TestAnotherOwnersSlowBacklogDoesNotHoldOurEventsBack(t *testing.T) {
	ctx := context.Background()
	s, _, fast, a, b := slowAndFastOwners(t, 500)
	for n := range 3 { // 30 deliveries, two batches' worth
		b.applied(t, 10+n)
	}
	a.applied(t, 99)

	// No per-owner cap beyond the batch: this is the claim's fairness.
	d := &Dispatcher{Store: s, Owner: "fair-dispatcher", Addresses: loopback, Timeout: 300 * time.Millisecond, PerOwner: DefaultBatch}
	delivered, failed, _, err := d.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(fast.requests()); got != 1 || delivered != 1 || failed != DefaultBatch-1 {
		t.Fatalf("first pass: A's webhook got %d requests, %d delivered, %d failed; want A's event delivered beside %d of B's",
			got, delivered, failed, DefaultBatch-1)
	}
}

// Owner B's ten webhooks never answer and B has a backlog of 50
// deliveries; owner A's receiver answers at once. A running dispatcher
// sends all of A's 24 events while B's attempts are still waiting for
// their (long) Timeout, and holds no more than PerOwner of B's at once.
// Found by a review: a pass waited for its slowest delivery before claiming
// the next batch, and B had one in every batch, so every owner's events
// went out one batch per attempt Timeout.
func TestSlowOwnerHoldsOnlyItsOwnSlots(t *testing.T) {
	ctx := context.Background()
	s, slow, fast, a, b := slowAndFastOwners(t, 200)
	for n := range 5 { // 50 of B's deliveries, older than A's
		b.applied(t, 10+n)
	}
	for n := range 24 { // 24 of A's events (e.g. intent.held, awaiting approval)
		a.applied(t, 100+n)
	}

	// B's attempts end only when the dispatcher stops: every request B's
	// receiver ever got is still in flight.
	const timeout = time.Minute
	d := &Dispatcher{Store: s, Owner: "pipelined", Addresses: loopback, Timeout: timeout, Lease: 3 * timeout}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(rctx, 50*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	answered := func() int {
		n := 0
		for _, g := range fast.requests() {
			if g.status == 200 {
				n++
			}
		}
		return n
	}
	if !wait.Until(20*time.Second, func() bool { return answered() >= 24 }) {
		t.Fatalf("A's receiver answered %d of its 24 events while B's held %d attempts; B's never-answering webhooks hold everyone back",
			answered(), len(slow.requests()))
	}
	perOwner := max(1, DefaultBatch/4)
	if !wait.Until(10*time.Second, func() bool { return len(slow.requests()) >= perOwner }) {
		t.Fatalf("B's webhooks got %d requests; want B's share of %d slots", len(slow.requests()), perOwner)
	}
	if n := len(slow.requests()); n != perOwner {
		t.Fatalf("B's never-answering webhooks hold %d of the dispatcher's %d slots; want at most %d", n, DefaultBatch, perOwner)
	}
}

// slowAndFastOwners is a ledger with two owners: B with the most webhooks
// an owner may have, each answering status only when its request is given
// up, and A with one webhook that answers 200 at once.
func slowAndFastOwners(t *testing.T, status int) (s *ledger.Store, slow, fast *receiver, a, b fixture) {
	t.Helper()
	ctx := context.Background()
	slow = newReceiver(t, func(_ int, r *http.Request) int { <-r.Context().Done(); return status })
	fast = newReceiver(t, always(200))
	s, err := ledger.Open(ctx, pgtest.NewDatabase(t), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	agentB, err := s.CreateAgent(ctx, "own_b", "owner B's bot")
	if err != nil {
		t.Fatal(err)
	}
	for i := range ledger.MaxWebhooksPerOwner {
		if _, err := s.CreateWebhook(ctx, "own_b", ledger.WebhookSpec{URL: slow.srv.URL + "/hook/" + strconv.Itoa(i), Secret: testSecret}); err != nil {
			t.Fatal(err)
		}
	}
	agentA, err := s.CreateAgent(ctx, "own_a", "owner A's bot")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateWebhook(ctx, "own_a", ledger.WebhookSpec{URL: fast.srv.URL + "/hook", Secret: testSecret}); err != nil {
		t.Fatal(err)
	}
	return s, slow, fast, fixture{store: s, owner: "own_a", agentID: agentA.ID}, fixture{store: s, owner: "own_b", agentID: agentB.ID}
}
