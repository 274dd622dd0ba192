package api

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/ledgertest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// watchRecorder collects what a WatchIntents stream delivers.
type watchRecorder struct {
	mu      sync.Mutex
	bySIK   map[string]int
	byID    map[int64]int
	recvErr error
}

func recordWatch(stream countersignv1.OwnerService_WatchIntentsClient) *watchRecorder {
	w := &watchRecorder{bySIK: map[string]int{}, byID: map[int64]int{}}
	go func() {
		for {
			m, err := stream.Recv()
			w.mu.Lock()
			if err != nil {
				w.recvErr = err
				w.mu.Unlock()
				return
			}
			w.bySIK[m.GetIntent().GetSik()]++
			w.byID[m.GetTransition().GetRecordId()]++
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *watchRecorder) has(sik string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bySIK[sik] > 0
}

func (w *watchRecorder) count() (siks int, twice []int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, n := range w.byID {
		if n > 1 {
			twice = append(twice, id)
		}
	}
	return len(w.bySIK), twice
}

func watchSIK(prefix string, n int) string {
	s := fmt.Sprintf("%s%0*d", prefix, 32-len(prefix), n)
	return strings.NewReplacer("0", "A", "1", "B", "2", "C", "3", "D", "4", "E", "5", "F", "6", "G", "7", "H", "8", "I", "9", "J").Replace(s)
}

// A burst of more transitions than one read returns, all inside the
// overlap window, is delivered whole, and what comes after it too: a full
// page of records already sent does not hide the records behind it. (The
// watch once re-read only the oldest page of its window, so after such a
// burst every poll saw the same sent records and the stream fell silent.)
func TestWatchIntentsDeliversABurstLargerThanAPage(t *testing.T) {
	const page = 4
	store, agent, got := ownerWatch(t, "own_burst", page)
	mk := func(n int) {
		t.Helper()
		k := ledger.Key{RailAccount: "acct_b", SIK: watchSIK("BURST", n)}
		if err := ledgertest.InFlight(context.Background(), store, ledger.NewIntent{Key: k, Rail: "stripe", Action: "refund", Subject: "pi_b",
			AmountMinor: 1, Currency: "USD", Canonical: "{}", AgentID: agent.ID}, k.SIK); err != nil {
			t.Fatal(err)
		}
	}
	// Each intent is born IN_FLIGHT: one record each, all well inside the
	// overlap window of one another.
	const burst = 5*page + 1
	start := time.Now()
	for i := range burst {
		mk(i)
	}
	if d := time.Since(start); d > watchOverlap/2 {
		t.Logf("the burst took %v; it is meant to fall inside the %v overlap window", d, watchOverlap)
	}
	if !wait.Until(15*time.Second, func() bool { n, _ := got.count(); return n == burst }) {
		n, _ := got.count()
		t.Fatalf("WatchIntents delivered %d of a burst of %d transitions (read %d at a time); recv: %v", n, burst, page, got.recvErr)
	}
	// The stream still delivers what comes after the burst.
	mk(burst)
	if !wait.Until(15*time.Second, func() bool { return got.has(watchSIK("BURST", burst)) }) {
		t.Fatalf("WatchIntents went silent after the burst; recv: %v", got.recvErr)
	}
	if _, twice := got.count(); len(twice) != 0 {
		t.Fatalf("records delivered more than once: %v", twice)
	}
}

// A transition whose transaction began before others but commits after
// them (its at_micros is older than records already sent) is still
// delivered: the watch re-reads the overlap window behind its cursor.
func TestWatchIntentsDeliversARecordCommittedLate(t *testing.T) {
	store, agent, got := ownerWatch(t, "own_late", 0)
	ni := func(sik string) ledger.NewIntent {
		return ledger.NewIntent{Key: ledger.Key{RailAccount: "acct_l", SIK: sik}, Rail: "stripe", Action: "refund", Subject: "pi_l",
			AmountMinor: 1, Currency: "USD", Canonical: "{}", AgentID: agent.ID}
	}
	late := watchSIK("LATE", 0)
	inserted, release, committed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var releaseOnce sync.Once
	letCommit := func() { releaseOnce.Do(func() { close(release) }) }
	// On a failure, the open transaction ends before the store closes.
	t.Cleanup(letCommit)
	go func() {
		committed <- store.InTx(context.Background(), func(tx *ledger.Tx) error {
			if _, _, err := tx.CreateIntent(context.Background(), ni(late)); err != nil {
				return err
			}
			select {
			case <-inserted:
			default:
				close(inserted)
			}
			<-release
			return nil
		})
	}()
	select {
	case <-inserted:
	case err := <-committed:
		t.Fatalf("the late transaction ended early: %v", err)
	}
	// Records stamped after the late one commit first and are sent.
	var early []string
	for i := range 5 {
		k := watchSIK("EARLY", i)
		early = append(early, k)
		if err := ledgertest.InFlight(context.Background(), store, ni(k), k); err != nil {
			t.Fatal(err)
		}
	}
	if !wait.Until(15*time.Second, func() bool {
		for _, k := range early {
			if !got.has(k) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the records committed first were not delivered; recv: %v", got.recvErr)
	}
	if got.has(late) {
		t.Fatal("an uncommitted record was delivered")
	}
	letCommit()
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if !wait.Until(15*time.Second, func() bool { return got.has(late) }) {
		t.Fatalf("a record committed after newer ones were sent was never delivered; recv: %v", got.recvErr)
	}
	if _, twice := got.count(); len(twice) != 0 {
		t.Fatalf("records delivered more than once: %v", twice)
	}
}

// ownerWatch serves the owner API (its watch pages of page records, or
// the default when 0), makes owner an agent, and opens a WatchIntents
// stream as owner (for 30 s) whose deliveries it records.
func ownerWatch(t *testing.T, owner string, page int) (*ledger.Store, ledger.Agent, *watchRecorder) {
	t.Helper()
	srv, store, conn := servedOwnerAPI(t)
	if page > 0 {
		srv.watchPage = page
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-test-owner", owner), 30*time.Second)
	t.Cleanup(cancel)
	agent, err := store.CreateAgent(ctx, owner, "bot")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := countersignv1.NewOwnerServiceClient(conn).WatchIntents(ctx, &countersignv1.WatchIntentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return store, agent, recordWatch(stream)
}

// A watch's cursor follows the ledger's clock, which stamps the records,
// not the clock of the process serving the watch: a process clock an hour
// ahead of the database's (or the database's an hour behind) once hid
// every transition until the database's clock caught up.
func TestWatchIntentsFollowsTheLedgersClock(t *testing.T) {
	srv, store, conn := servedOwnerAPI(t)
	srv.now = func() time.Time { return time.Now().Add(time.Hour) }
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-test-owner", "own_clock"), 30*time.Second)
	t.Cleanup(cancel)
	agent, err := store.CreateAgent(ctx, "own_clock", "bot")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := countersignv1.NewOwnerServiceClient(conn).WatchIntents(ctx, &countersignv1.WatchIntentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := recordWatch(stream)
	k := ledger.Key{RailAccount: "acct_c", SIK: watchSIK("CLOCK", 0)}
	if err := ledgertest.InFlight(ctx, store, ledger.NewIntent{Key: k, Rail: "stripe", Action: "refund", Subject: "pi_c",
		AmountMinor: 1, Currency: "USD", Canonical: "{}", AgentID: agent.ID}, k.SIK); err != nil {
		t.Fatal(err)
	}
	if !wait.Until(15*time.Second, func() bool { return got.has(k.SIK) }) {
		t.Fatalf("a transition stamped by the ledger's clock, an hour behind the serving process's, was not delivered; recv: %v", got.recvErr)
	}
}
