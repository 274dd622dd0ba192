package razorpay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

const (
	// pageCount is the page size Find asks for: Razorpay's documented
	// maximum, so a page shorter than it can only mean the list ended.
	pageCount = 100
	// overlap is how many entities each page repeats from the previous
	// one; pages advance by pageCount − overlap.
	overlap = 10
	// maxPages bounds one search; beyond it Find gives up without
	// claiming exhaustion.
	maxPages = 2000
)

type collection struct {
	Entity string             `json:"entity"`
	Items  *[]json.RawMessage `json:"items"`
}

// Find implements rail.Adapter with overlapping offset pages:
//
//   - refunds: GET /v1/payments/{id}/refunds?count=100&skip=N
//   - payouts: GET /v1/payouts?account_number=…&count=100&skip=N&from=since
//
// It matches on notes.countersign_sik alone and ends only on a page with
// fewer than pageCount items.
//
// Why it cannot miss an entity E that existed when Find began. Lists are
// newest first; page i is fetched with skip s_i = i·step, step = pageCount
// − overlap. Between two fetches E's position can grow without bound (new
// entities enter at the head: inserts push E toward the tail) but shrink
// by at most overlap (entities are never deleted; only entities created in
// the same second may be reordered between queries). If E is not on page
// 0 its position is ≥ pageCount = s_0 + pageCount. If E was past the end of
// page i (position ≥ s_i + pageCount), then at fetch i+1 its position is
// ≥ s_i + pageCount − overlap = s_{i+1}, so it is either on page i+1 or,
// again, past its end. So an E never returned is past the end of every
// page, including the last one; but the last page is short, so nothing is
// past its end: contradiction. Inserts make pages repeat entities, hence
// the de-duplication by id. Entities created after Find began are not
// promised; the reconciler waits a minimum delay before searching.
func (adapter) Find(ctx context.Context, c rail.Client, a rail.Action, stamp string, since time.Time) (rail.Finding, error) {
	var f rail.Finding
	if _, _, err := sik.ParseStamp(stamp); err != nil {
		return f, fmt.Errorf("razorpay: find: %w", err)
	}
	if !isID(a.Subject) {
		return f, fmt.Errorf("razorpay: find: subject %q is not a Razorpay id", a.Subject)
	}
	q := url.Values{"count": {strconv.Itoa(pageCount)}}
	var path string
	switch a.Kind {
	case sik.KindRefund:
		path = "/v1/payments/" + a.Subject + "/refunds"
	case sik.KindPayout:
		acct := a.Extra["account_number"]
		if !isID(acct) {
			return f, fmt.Errorf("razorpay: find payout: account_number %q missing from the action", acct)
		}
		path = "/v1/payouts"
		q.Set("account_number", acct)
		if !since.IsZero() && since.Unix() > 0 {
			q.Set("from", strconv.FormatInt(since.Unix(), 10))
		}
	default:
		return f, fmt.Errorf("razorpay: find: no %q action", a.Kind)
	}
	want := entityOf[a.Kind]
	seen := map[string]bool{}
	for skip := 0; ; skip += pageCount - overlap {
		if f.Pages >= maxPages {
			return f, fmt.Errorf("razorpay: find %s: gave up after %d pages", path, f.Pages)
		}
		q.Set("skip", strconv.Itoa(skip))
		status, body, err := get(ctx, c, path+"?"+q.Encode())
		if err != nil {
			return f, fmt.Errorf("razorpay: list %s skip %d: %w", path, skip, err)
		}
		if status < 200 || status > 299 {
			return f, fmt.Errorf("razorpay: list %s skip %d: status %d: %s", path, skip, status, errorMessage(body))
		}
		var page collection
		if err := json.Unmarshal(body, &page); err != nil {
			return f, fmt.Errorf("razorpay: list %s skip %d: undecodable: %w", path, skip, err)
		}
		if page.Entity != "collection" || page.Items == nil {
			return f, fmt.Errorf("razorpay: list %s skip %d: not a collection (entity %q, items missing)", path, skip, page.Entity)
		}
		items := *page.Items
		if len(items) > pageCount {
			return f, fmt.Errorf("razorpay: list %s skip %d: %d items, more than the %d asked for", path, skip, len(items), pageCount)
		}
		f.Pages++
		fresh := 0
		for i, raw := range items {
			e, err := entity(raw, want)
			if err != nil {
				return f, fmt.Errorf("razorpay: list %s skip %d item %d: %w", path, skip, i, err)
			}
			if e.Stamp == stamp {
				f.Match = &e
				f.Exhausted = len(items) < pageCount
				return f, nil
			}
			if !seen[e.ID] {
				seen[e.ID] = true
				fresh++
			}
		}
		if len(items) < pageCount {
			f.Exhausted = true
			return f, nil
		}
		// A full page of entities already seen means skip was not honoured
		// (or overlap-many inserts landed between two requests): paging
		// proves nothing then.
		if fresh == 0 {
			return f, fmt.Errorf("razorpay: list %s skip %d: a full page with nothing new", path, skip)
		}
	}
}

func entity(raw json.RawMessage, want string) (rail.Entity, error) {
	var c created
	if err := json.Unmarshal(raw, &c); err != nil {
		return rail.Entity{}, err
	}
	if c.ID == "" || c.Entity != want || c.Amount == nil {
		return rail.Entity{}, fmt.Errorf("not a %s with an id and amount (entity %q, id %q)", want, c.Entity, c.ID)
	}
	return rail.Entity{
		ID:          c.ID,
		Stamp:       c.stamp(),
		AmountMinor: *c.Amount,
		Currency:    strings.ToUpper(c.Currency),
		Status:      c.Status,
		Created:     time.Unix(c.CreatedAt, 0).UTC(),
		Raw:         raw,
	}, nil
}
