package railtest

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/rail"
)

// Listed is one refund/payout/transfer held by a FakeRail.
type Listed struct {
	ID          string
	Stamp       string // the countersign_sik value, "" when unstamped
	AmountMinor int64
	Currency    string // upper case; fixtures write the rail's own case
	Status      string
	Created     time.Time
}

// ListCall is one list request a FakeRail received, with what it holds.
type ListCall struct {
	N      int // 1-based number of the list request
	Req    *http.Request
	Action rail.Action // the action whose entities the rail holds
	Since  time.Time   // the since the adapter was given
	Items  []Listed    // newest first, a snapshot
}

// ListFunc answers one list request in a rail's dialect: it checks that the
// adapter asked for the right path, filters and page size (returning an
// error when not: the FakeRail then answers 400 and fails the test) and
// renders the page.
type ListFunc func(c ListCall) (status int, body []byte, err error)

// FakeRail is an http.Handler holding a newest-first list of entities for
// one action's subject and serving them through a fixture's ListFunc. Faults
// (a failed or garbled page) and inserts between pages are scripted per list
// request number.
type FakeRail struct {
	t      testing.TB
	list   ListFunc
	action rail.Action
	since  time.Time

	mu     sync.Mutex
	items  []Listed
	calls  int
	faults map[int]fault
	after  func(n int, f *FakeRail)
}

type fault struct {
	status int
	body   []byte
}

// NewFakeRail returns a FakeRail holding items (newest first).
func NewFakeRail(t testing.TB, list ListFunc, a rail.Action, since time.Time, items []Listed) *FakeRail {
	return &FakeRail{t: t, list: list, action: a, since: since, items: slices.Clone(items), faults: map[int]fault{}}
}

// Insert adds items as the newest entities, items[0] newest, as a rail does
// when entities are created.
func (f *FakeRail) Insert(items ...Listed) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items = append(slices.Clone(items), f.items...)
}

// Mutate replaces the held entities with edit(entities), e.g. to reorder
// entities that share a creation second between two page requests.
func (f *FakeRail) Mutate(edit func([]Listed) []Listed) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items = edit(slices.Clone(f.items))
}

// Fail makes list request n (1-based) answer status with body instead of a
// page.
func (f *FakeRail) Fail(n, status int, body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[n] = fault{status, body}
}

// After runs hook once list request n's answer is decided and before it is
// sent (it may Insert: the insert lands between two page requests).
func (f *FakeRail) After(hook func(n int, f *FakeRail)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.after = hook
}

// Calls reports how many list requests were received.
func (f *FakeRail) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// ServeHTTP implements http.Handler.
func (f *FakeRail) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.calls++
	n := f.calls
	flt, failed := f.faults[n]
	call := ListCall{N: n, Req: r, Action: f.action, Since: f.since, Items: slices.Clone(f.items)}
	hook := f.after
	f.mu.Unlock()

	status, body := flt.status, flt.body
	if !failed {
		var err error
		status, body, err = f.list(call)
		if err != nil {
			f.t.Errorf("fake rail: list request %d %s %s: %v", n, r.Method, r.URL.RequestURI(), err)
			status, body = http.StatusBadRequest, []byte(fmt.Sprintf(`{"error":{"message":%q}}`, err.Error()))
		}
	}
	// The hook runs after the page is rendered and before it is sent, so
	// the adapter cannot ask for the next page before the hook is done.
	if hook != nil {
		hook(n, f)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// CursorPage pages items (newest first) like Stripe: the limit entities
// after the one with id startingAfter ("" for the first page), and whether
// more follow. It fails for an unknown cursor.
func CursorPage(items []Listed, startingAfter string, limit int) (page []Listed, hasMore bool, err error) {
	start := 0
	if startingAfter != "" {
		i := slices.IndexFunc(items, func(e Listed) bool { return e.ID == startingAfter })
		if i < 0 {
			return nil, false, fmt.Errorf("unknown cursor %q", startingAfter)
		}
		start = i + 1
	}
	end := min(start+limit, len(items))
	return items[start:end], end < len(items), nil
}

// OffsetPage pages items (newest first) like Razorpay: count entities from
// offset skip.
func OffsetPage(items []Listed, skip, count int) []Listed {
	if skip >= len(items) {
		return nil
	}
	return items[skip:min(skip+count, len(items))]
}
