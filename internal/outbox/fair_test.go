package outbox

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// Owner B's webhooks answer slowly and B's events are older and more than
// a batch; owner A's event, written after, still goes out in the very next
// pass: the claim shares each batch among owners instead of serving the
// oldest deliveries of whichever owner wrote most.
func TestAnotherOwnersSlowBacklogDoesNotHoldOurEventsBack(t *testing.T) {
	ctx := context.Background()
	slow := newReceiver(t, func(_ int, r *http.Request) int { <-r.Context().Done(); return 500 })
	fast := newReceiver(t, always(200))
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
	b := fixture{store: s, owner: "own_b", agentID: agentB.ID}
	for n := range 3 { // 30 deliveries, two batches' worth
		b.applied(t, 10+n)
	}
	fixture{store: s, owner: "own_a", agentID: agentA.ID}.applied(t, 99)

	d := &Dispatcher{Store: s, Owner: "fair-dispatcher", Addresses: loopback, Timeout: 300 * time.Millisecond}
	delivered, failed, _, err := d.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(fast.requests()); got != 1 || delivered != 1 || failed != DefaultBatch-1 {
		t.Fatalf("first pass: A's webhook got %d requests, %d delivered, %d failed; want A's event delivered beside %d of B's",
			got, delivered, failed, DefaultBatch-1)
	}
}
