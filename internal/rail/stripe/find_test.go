package stripe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
	"github.com/countersign/countersign/internal/sik"
)

// fatPayouts serves GET /v1/payouts like Stripe (newest first, limit,
// starting_after) over n payouts that each carry what the agent may write:
// a 5000-character description of '"' (escaped to twice that) and 49
// metadata pairs of 4-byte runes (40-rune keys, 500-rune values), with the
// one at stampAt stamped. It records the limits asked for.
type fatPayouts struct {
	items []string
	ids   []string

	mu     sync.Mutex
	limits []int
}

func newFatPayouts(t *testing.T, n, stampAt int) *fatPayouts {
	t.Helper()
	md := map[string]string{}
	for i := range 49 {
		md[fmt.Sprintf("%02d", i)+strings.Repeat("😀", 38)] = strings.Repeat("😀", 500)
	}
	s := &fatPayouts{}
	for i := range n {
		m := md
		if i == stampAt {
			m = map[string]string{sik.StampKey: stampA}
			for k, v := range md {
				m[k] = v
			}
		}
		id := fmt.Sprintf("po_%04d", i)
		b, err := json.Marshal(map[string]any{"id": id, "object": "payout", "amount": 100, "currency": "usd", "status": "paid",
			"created": 1760000000 - i, "destination": "ba_1", "description": strings.Repeat(`"`, 5000), "metadata": m})
		if err != nil {
			t.Fatal(err)
		}
		s.items, s.ids = append(s.items, string(b)), append(s.ids, id)
	}
	return s
}

func (s *fatPayouts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := strconv.Atoi(q.Get("limit"))
	if r.URL.Path != "/v1/payouts" || err != nil || limit < 1 || limit > 100 {
		http.Error(w, `{"error":{"message":"bad list request"}}`, http.StatusBadRequest)
		return
	}
	start := 0
	if after := q.Get("starting_after"); after != "" {
		start = slices.Index(s.ids, after) + 1
	}
	end := min(start+limit, len(s.items))
	body := fmt.Sprintf(`{"object":"list","url":"/v1/payouts","has_more":%t,"data":[%s]}`, end < len(s.items), strings.Join(s.items[start:end], ","))
	s.mu.Lock()
	s.limits = append(s.limits, limit)
	s.mu.Unlock()
	_, _ = w.Write([]byte(body))
}

// TestFindHalvesAPageOverTheBound: 100 payouts the agent filled make a
// page over maxBody. Failing the page made every payout search that
// reached it inconclusive for good (QUARANTINED after the attempts run
// out); Find must ask again from the same cursor for fewer.
func TestFindHalvesAPageOverTheBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   int
	}{{"match_on_the_last_page", 245}, {"absent", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFatPayouts(t, 250, tc.at)
			if one := len(s.items[0]); 100*one <= maxBody {
				t.Fatalf("a page of 100 payouts of %d bytes is within %d: the test proves nothing", one, maxBody)
			}
			srv := httptest.NewServer(s)
			defer srv.Close()
			a := rail.Action{Kind: sik.KindPayout, Subject: "ba_other", Currency: "USD"}
			f, err := New().Find(context.Background(), railtest.NewClient(srv.URL, "", srv.Client()), a, stampA, time.Unix(1759990000, 0))
			if err != nil || !f.Exhausted {
				t.Fatalf("Find = %+v, %v; want the listing read to its end", f, err)
			}
			if (tc.at >= 0) != (f.Match != nil) || (f.Match != nil && f.Match.ID != s.ids[tc.at]) {
				t.Fatalf("Match = %+v, want the payout at %d", f.Match, tc.at)
			}
			if slices.Min(s.limits) >= pageLimit || slices.Max(s.limits) != pageLimit {
				t.Fatalf("limits asked for: %v; want 100 first and smaller pages after an oversized one", s.limits)
			}
		})
	}
}

// TestFindFailsOnOneEntityOverTheBound: a single entity above maxBody
// cannot be read at any limit: an error, never exhaustion.
func TestFindFailsOnOneEntityOverTheBound(t *testing.T) {
	s := newFatPayouts(t, 3, -1)
	s.items[1] = strings.Replace(s.items[1], `"description"`, `"x":"`+strings.Repeat("y", maxBody)+`","description"`, 1)
	srv := httptest.NewServer(s)
	defer srv.Close()
	a := rail.Action{Kind: sik.KindPayout, Subject: "ba_other", Currency: "USD"}
	f, err := New().Find(context.Background(), railtest.NewClient(srv.URL, "", srv.Client()), a, stampA, time.Unix(1759990000, 0))
	if err == nil || f.Exhausted || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("Find = %+v, %v; want a size error, not exhausted", f, err)
	}
	if got := s.limits[len(s.limits)-1]; got != 1 {
		t.Fatalf("limits asked for: %v; want the descent to end at 1", s.limits)
	}
}
