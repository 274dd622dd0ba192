package razorpay

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/rail/railtest"
	"github.com/countersign/countersign/internal/sik"
)

// oneSecond makes the n entities from position from share the creation
// second of the first of them.
func oneSecond(items []railtest.Listed, from, n int) []railtest.Listed {
	for i := from; i < from+n; i++ {
		items[i].Created = items[from].Created
	}
	return items
}

// reorderGroups gives every run of same-second entities a new order, as a
// database may on every query: reversed on odd queries, rotated by a third
// on even ones.
func reorderGroups(n int, items []railtest.Listed) []railtest.Listed {
	for i := 0; i < len(items); {
		j := i
		for j < len(items) && items[j].Created.Equal(items[i].Created) {
			j++
		}
		if n%2 == 1 {
			slices.Reverse(items[i:j])
		} else if g := j - i; g > 2 {
			items = slices.Concat(items[:i], items[i+g/3:j], items[i:i+g/3], items[j:])
		}
		i = j
	}
	return items
}

// TestFindSameSecondGroupAtBoundary: a burst of entities created in one
// second straddles a page boundary and comes back in another order on the
// next query, moving the target by more than overlap places toward the
// head. Fixed pageCount−overlap steps skip it and claim exhaustion (the
// hole a review found: CONFIRMED_NOT_APPLIED for a payout that moved);
// every page must begin where the boundary's second begins.
func TestFindSameSecondGroupAtBoundary(t *testing.T) {
	cases := []struct {
		name            string
		n, from, size   int
		at              int
		insertsAfterOne int
	}{
		// The review's probe: 40 in one second at 70..109, target at 100.
		{name: "burst_40_target_after_boundary", n: 150, from: 70, size: 40, at: 100},
		{name: "burst_12_moves_target_overlap_plus_one", n: 150, from: 89, size: 12, at: 100},
		{name: "burst_30_target_last_of_group", n: 230, from: 85, size: 30, at: 114},
		{name: "burst_99_largest_that_pages", n: 300, from: 50, size: 99, at: 148},
		{name: "bursts_on_two_boundaries", n: 400, from: 80, size: 40, at: 110},
		{name: "burst_with_inserts_between_pages", n: 230, from: 70, size: 40, at: 100, insertsAfterOne: 7},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, target, f, err := findOn(t, payout, tc.n, tc.at, func(fr *railtest.FakeRail) {
				fr.Mutate(func(items []railtest.Listed) []railtest.Listed {
					items = oneSecond(items, tc.from, tc.size)
					if tc.name == "bursts_on_two_boundaries" {
						items = oneSecond(items, 150, 45)
					}
					return items
				})
				fr.After(func(n int, fr *railtest.FakeRail) {
					fr.Mutate(func(items []railtest.Listed) []railtest.Listed { return reorderGroups(n, items) })
					if n == 1 {
						for i := range tc.insertsAfterOne {
							fr.Insert(railtest.Listed{ID: fmt.Sprintf("pout_new%d", i), AmountMinor: 1, Currency: "INR", Created: time.Unix(1_760_000_001, 0)})
						}
					}
				})
			})
			if err != nil || f.Match == nil || f.Match.ID != target.ID {
				t.Fatalf("Find = %+v (match %+v), %v; want %s", f, f.Match, err, target.ID)
			}
		})
	}
}

// TestFindSkipsToTheBoundarySecond: the page after one that ends inside a
// same-second group begins where that group begins, and paging goes on by
// pageCount−overlap past it.
func TestFindSkipsToTheBoundarySecond(t *testing.T) {
	l, _, f, err := findOn(t, refund, 250, -1, func(fr *railtest.FakeRail) {
		fr.Mutate(func(items []railtest.Listed) []railtest.Listed { return oneSecond(items, 70, 40) })
	})
	if err != nil || f.Match != nil || !f.Exhausted {
		t.Fatalf("Find = %+v, %v", f, err)
	}
	if got, want := l.seenSkips(), []int{0, 70, 160}; !slices.Equal(got, want) {
		t.Fatalf("skips = %v, want %v", got, want)
	}
}

// TestFindWholePageOfOneSecond: when a full page holds one second only,
// the group is at least a page long and its order is free on every query:
// no offset can page through it, so Find must fail rather than conclude
// absence. Here the rail keeps the target off whichever page is read.
func TestFindWholePageOfOneSecond(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   int
	}{
		{"target_in_the_group_hidden", 150},
		{"no_target", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, f, err := findOn(t, refund, 300, tc.at, func(fr *railtest.FakeRail) {
				fr.Mutate(func(items []railtest.Listed) []railtest.Listed { return oneSecond(items, 50, 151) })
				if tc.at < 0 {
					return
				}
				// Before each query, move the target (same second, so any
				// place in 50..200 is a legal order) to where the last page
				// read under fixed steps was not and the next one is not.
				fr.After(func(n int, fr *railtest.FakeRail) {
					fr.Mutate(func(items []railtest.Listed) []railtest.Listed {
						i := slices.IndexFunc(items, func(e railtest.Listed) bool { return e.Stamp != "" })
						e := items[i]
						items = slices.Delete(items, i, i+1)
						return slices.Insert(items, []int{0, 195, 60, 60}[min(n, 3)], e)
					})
				})
			})
			switch {
			case f.Exhausted && f.Match == nil:
				t.Fatalf("Find = %+v, %v; exhausted without the stamp across a page of one second", f, err)
			case err == nil && (f.Match == nil || f.Match.Stamp == ""):
				t.Fatalf("Find = %+v with no error; want the target or an error", f)
			case err != nil && !strings.Contains(err.Error(), "one second"):
				t.Fatalf("Find error = %v, want the one-second reason", err)
			case tc.at < 0 && err == nil:
				t.Fatalf("Find = %+v with no target and no error", f)
			}
		})
	}
}

// bigNotes is a notes object that fills what the adapter lets through in
// a body under 64 KiB (14 values of 256 bytes; it bounds values, not
// keys), as Razorpay's PHP encoder writes it back: each é as \u00e9, three
// times its UTF-8 size.
func bigNotes(keyLen int, stamp string) string {
	var b strings.Builder
	b.WriteString("{")
	for j := range 14 {
		fmt.Fprintf(&b, `"%02d%s":"%s",`, j, strings.Repeat(`\u00e9`, keyLen), strings.Repeat(`\u00e9`, 128))
	}
	key := "order"
	if stamp != "" {
		key = sik.StampKey
	}
	fmt.Fprintf(&b, `%q:%q}`, key, stamp)
	return b.String()
}

// bigNotesRail serves n such refunds of pay_1 (the one at stampAt stamped)
// with offset paging.
func bigNotesRail(t *testing.T, n, keyLen, stampAt int) *httptest.Server {
	t.Helper()
	plain, stamped := bigNotes(keyLen, ""), bigNotes(keyLen, stampA)
	items := make([]string, n)
	for i := range items {
		notes := plain
		if i == stampAt {
			notes = stamped
		}
		items[i] = strings.Replace(refundJSON(fmt.Sprintf("rfnd_%03d", i), "pay_1", 1, notes), "1597078866", fmt.Sprint(1597078866-i), 1)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		skip, count := 0, 0
		_, _ = fmt.Sscan(r.URL.Query().Get("skip"), &skip)
		_, _ = fmt.Sscan(r.URL.Query().Get("count"), &count)
		page := items[min(skip, n):min(skip+count, n)]
		_, _ = fmt.Fprintf(w, `{"entity":"collection","count":%d,"items":[%s]}`, len(page), strings.Join(page, ","))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestFindReadsPagesLargerThanTheBound: notes the agent may write make a
// page of 100 refunds larger than maxBody. Reading a page whole failed it,
// for every search that reached it, forever (each ended QUARANTINED).
func TestFindReadsPagesLargerThanTheBound(t *testing.T) {
	item := len(refundJSON("rfnd_000", "pay_1", 1, bigNotes(1000, "")))
	if pageCount*item <= maxBody {
		t.Fatalf("a page of %d refunds of %d bytes is within %d: the test proves nothing", pageCount, item, maxBody)
	}
	for _, tc := range []struct {
		name string
		at   int
	}{{"match_on_page_3", 205}, {"absent", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := bigNotesRail(t, 250, 1000, tc.at)
			f, err := New().Find(context.Background(), railtest.NewClient(srv.URL, "", srv.Client()), refund, stampA, time.Time{})
			if err != nil || !f.Exhausted || f.Pages != 3 {
				t.Fatalf("Find = %+v, %v; want three pages read to the end", f, err)
			}
			if (tc.at >= 0) != (f.Match != nil) || (f.Match != nil && f.Match.ID != fmt.Sprintf("rfnd_%03d", tc.at)) {
				t.Fatalf("Match = %+v, want the one at %d", f.Match, tc.at)
			}
		})
	}
}

// TestFindRefusesAnItemOverTheBound: one entity above maxBody is an error,
// never skipped.
func TestFindRefusesAnItemOverTheBound(t *testing.T) {
	srv := bigNotesRail(t, 1, maxBody/(14*6), -1)
	f, err := New().Find(context.Background(), railtest.NewClient(srv.URL, "", srv.Client()), refund, stampA, time.Time{})
	if err == nil || f.Exhausted || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("Find = %+v, %v; want a size error", f, err)
	}
}

// TestFindReachesPastABurstOfOneSecond: a hundred entities created in one
// second (a burst an agent can make) no longer end every search that
// reaches them: Find steps over the page and still finds a stamped entity
// older than the burst; with none, it answers inconclusive, never
// exhausted (found by a review: each search stopped at the burst, so every
// earlier intent of the account ended quarantined).
func TestFindReachesPastABurstOfOneSecond(t *testing.T) {
	for _, at := range []int{130, 400} {
		_, target, f, err := findOn(t, payout, 500, at, func(fr *railtest.FakeRail) {
			fr.Mutate(func(items []railtest.Listed) []railtest.Listed { return oneSecond(items, 20, 100) })
		})
		if err != nil || f.Match == nil || f.Match.ID != target.ID {
			t.Errorf("target at %d past the burst: Find = match %v exhausted %v pages %d, err %v; want it found", at, f.Match != nil, f.Exhausted, f.Pages, err)
		}
	}
	_, _, f, err := findOn(t, payout, 500, -1, func(fr *railtest.FakeRail) {
		fr.Mutate(func(items []railtest.Listed) []railtest.Listed { return oneSecond(items, 20, 100) })
	})
	if err == nil || f.Exhausted || !strings.Contains(err.Error(), "one second") {
		t.Fatalf("no target past a burst: Find = %+v, %v; want inconclusive naming the second", f, err)
	}
}
