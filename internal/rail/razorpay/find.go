package razorpay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
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
	// overlap is the least a page repeats of the previous one: a page
	// advances by at most pageCount − overlap. The proof below does not
	// need it (the same-second rule does the work); it is margin for a
	// listing whose order strays a few places from created_at.
	overlap = 10
	// maxPages bounds one search; beyond it Find gives up without
	// claiming exhaustion. Pages advance by 90 entities when seconds are
	// distinct and, in the worst arrangement of same-second groups, by at
	// least 90 over any two pages: 2000 pages reach 90,000 entities.
	maxPages = 2000
)

// Find implements rail.Adapter with overlapping offset pages:
//
//   - refunds: GET /v1/payments/{id}/refunds?count=100&skip=N
//   - payouts: GET /v1/payouts?account_number=…&count=100&skip=N&from=since
//
// It matches on notes.countersign_sik alone and ends only on a page with
// fewer than pageCount items.
//
// A refund's absence is read from its payment's refunds alone, not also
// from the account's (GET /v1/refunds), as Stripe's is (stripe.Find): a
// Razorpay refund request names its payment in its URL path (POST
// /v1/payments/{id}/refund), which Countersign and Razorpay read alike,
// so a refund the rail made under the stamp can only be of that payment;
// the parser differential the account's listing guards against at Stripe
// (a payment named in a body the two read otherwise) has no room here.
// And the account's listing would cost the proof: a burst of a hundred
// refunds in one second anywhere on the account, which an agent can
// make, is a page of one second that no search proves absence across
// (below), so every refund whose window covered it would end quarantined
// (found by a review). The payout listing is every fund account's.
//
// What it rests on. Lists are newest first by created_at, a unix second;
// entities are never deleted and created_at never changes; entities of
// the same second come back in any order, and a new order on every query
// (what a database does with ties in ORDER BY). New entities may appear
// anywhere between queries.
//
// How pages advance. After a full page at skip s whose last item was
// created in second T, let k be the index of the page's first item not
// newer than T (where T's group begins on the page). The next skip is s +
// min(pageCount − overlap, k). So every page begins at or before the
// first position the boundary's second held when the page before was
// read: a same-second group at a boundary is always read again whole by
// the next page, whatever order it comes back in. When k = 0 a whole
// page belongs to one second: a group of at least pageCount entities
// whose order is free, which no offset can page through. Find steps a
// whole page on (every entity older than that second is still reached,
// as below, so a stamped one there is found), and if it reaches the end
// without the stamp it answers inconclusive, not exhausted: an entity of
// that second may have been passed by. (A burst of a hundred payouts in
// one second, made by an agent to hide others' entities, first stopped
// every search at it: found by a review.) Listing that second alone
// (from = to = T) would answer a full page too.
//
// Why it cannot miss an entity E (created in second t) that existed when
// Find began. Write newer_q(E) for how many entities are strictly newer
// than E at query q: every position before newer_q(E) holds one of them
// and E sits at newer_q(E) or after, somewhere in its group. newer_q(E)
// never decreases (no deletions, created_at fixed). Invariant: if E was
// not yet returned, newer_i(E) ≥ s_i at page i. It holds at s_0 = 0. Say
// it holds at a full page i that does not return E: E's position is ≥ s_i
// and not on the page, so ≥ s_i + pageCount, and t ≤ T_i. If t < T_i,
// every position up to s_i + pageCount − 1 holds an entity newer than E,
// so newer_{i+1}(E) ≥ newer_i(E) ≥ s_i + pageCount > s_{i+1}. If t = T_i,
// the items before index k are newer than E, and the positions before s_i
// too (invariant), so newer_{i+1}(E) ≥ s_i + k ≥ s_{i+1}. Either way it
// holds at page i+1. A page of one second (k = 0) is stepped over by
// pageCount: the first case still holds for every E older than T_i, and
// an E of T_i itself is what makes the search end inconclusive. At the last page, which is short, E's position is ≥
// s_L and before the end of the list: E is on it. Inserts make pages
// repeat entities, hence the de-duplication by id. Entities created
// after Find began are not promised; the reconciler waits a minimum delay
// before searching.
func (adapter) Find(ctx context.Context, c rail.Client, a rail.Action, stamp string, since time.Time) (rail.Finding, error) {
	var f rail.Finding
	if _, _, err := sik.ParseStamp(stamp); err != nil {
		return f, fmt.Errorf("razorpay: find: %w", err)
	}
	if !rail.IsID(a.Subject) {
		return f, fmt.Errorf("razorpay: find: subject %q is not a Razorpay id", a.Subject)
	}
	switch a.Kind {
	case sik.KindRefund:
		return search(ctx, c, "/v1/payments/"+a.Subject+"/refunds", url.Values{}, a, stamp)
	case sik.KindPayout:
		acct := a.Extra["account_number"]
		if !rail.IsID(acct) {
			return f, fmt.Errorf("razorpay: find payout: account_number %q missing from the action", acct)
		}
		return search(ctx, c, "/v1/payouts", fromSince(url.Values{"account_number": {acct}}, since), a, stamp)
	}
	return f, fmt.Errorf("razorpay: find: no %q action", a.Kind)
}

// fromSince bounds the listing q to entities created since, when set.
func fromSince(q url.Values, since time.Time) url.Values {
	if !since.IsZero() && since.Unix() > 0 {
		q.Set("from", strconv.FormatInt(since.Unix(), 10))
	}
	return q
}

// search reads the listing path?q to its end, or to the entity stamped
// stamp (its Unlike set against a), as Find describes.
func search(ctx context.Context, c rail.Client, path string, q url.Values, a rail.Action, stamp string) (rail.Finding, error) {
	var f rail.Finding
	q.Set("count", strconv.Itoa(pageCount))
	want := entityOf[a.Kind]
	seen := map[string]bool{}
	// Seconds of which a whole page was stepped over (nextStep): an entity
	// of one of them may have been passed by, so their listing proves no
	// absence; every older entity is still reached.
	var stepped []int64
	for skip := 0; ; {
		if f.Pages >= maxPages {
			return f, fmt.Errorf("razorpay: find %s: gave up after %d pages", path, f.Pages)
		}
		q.Set("skip", strconv.Itoa(skip))
		rows, match, err := listPage(ctx, c, path+"?"+q.Encode(), want, stamp)
		if err != nil {
			return f, fmt.Errorf("razorpay: list %s skip %d: %w", path, skip, err)
		}
		f.Pages++
		if match != nil {
			match.Unlike = rail.UnlikeListed[created](match.Raw, a, want)
			f.Match = match
			f.Exhausted = len(rows) < pageCount
			return f, nil
		}
		if len(rows) < pageCount {
			if len(stepped) > 0 {
				return f, fmt.Errorf("razorpay: list %s: a full page of entities created in one second (%d) was stepped over: their order changes between queries, so one of them may have been passed by, and the listing proves no absence", path, stepped[0])
			}
			f.Exhausted = true
			return f, nil
		}
		fresh := 0
		for _, r := range rows {
			if !seen[r.id] {
				seen[r.id] = true
				fresh++
			}
		}
		// A full page of entities already seen means skip was not honoured
		// (or as many inserts as the step landed between two requests):
		// paging proves nothing then.
		if fresh == 0 {
			return f, fmt.Errorf("razorpay: list %s skip %d: a full page with nothing new", path, skip)
		}
		step, ok := nextStep(rows)
		if !ok {
			// A page of one second: every entity older than it has at least
			// a page of newer ones before it, so the next page may begin a
			// page further on; an entity of that second may be passed by.
			stepped = append(stepped, rows[0].created)
			step = pageCount
		}
		skip += step
	}
}

// nextStep is how far the page after a full page (rows) may begin: no
// further than where the last item's second begins on this page, and no
// further than pageCount − overlap; ok is false when the whole page is
// of one second (no step keeps the proof for that second).
func nextStep(rows []row) (step int, ok bool) {
	last := rows[len(rows)-1].created
	k := slices.IndexFunc(rows, func(r row) bool { return r.created <= last })
	if k == 0 {
		return 0, false
	}
	return min(pageCount-overlap, k), true
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
