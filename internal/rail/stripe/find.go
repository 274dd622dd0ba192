package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// pageLimit is Stripe's largest page.
const pageLimit = 100

// maxPages bounds one search (100,000 entities); beyond it Find gives up
// without claiming exhaustion.
const maxPages = 1000

type listPage struct {
	Object  string             `json:"object"`
	Data    *[]json.RawMessage `json:"data"`
	HasMore *bool              `json:"has_more"`
}

// Find implements rail.Adapter. It pages newest first with starting_after
// until has_more is false, and matches on metadata.countersign_sik alone.
// Cursor paging is stable under inserts: new entities are created at the
// head, before every cursor, so none of the older pages shift. A page
// larger than maxBody (the agent writes descriptions and metadata) is asked
// for again from the same cursor with half the limit, down to one entity;
// the limit doubles back after each page read. Changing the limit between
// pages changes nothing the cursor proves.
//
//   - refunds: GET /v1/refunds?payment_intent=… (or charge=… for a
//     charge subject), then, before absence is claimed, the account's
//     refunds since (see below).
//   - payouts: GET /v1/payouts?created[gte]=since, all destinations: a
//     destination filter could hide a payout whose destination Stripe
//     reports differently, and absence must be proven, not assumed.
//   - transfers: GET /v1/transfers?destination=…&created[gte]=since,
//     then, before absence is claimed, the account's transfers since.
//
// The subject's listing is the quick way to a match, but Stripe applies
// its filter: a refund or transfer the rail made under the stamp for
// another payment or destination (it read the request otherwise than
// Countersign did) is not in it, and its end would prove an absence that
// is not one. So before answering "absent, read to the end", Find reads
// the account's listing of that kind unfiltered by subject, bounded as
// the payouts' is (created[gte]=since); a stamped entity there is the
// match, and the reconciler's Unlike check keeps it from being taken as
// applied. The extra listing is paid only where absence would be
// recorded (found by a review).
func (adapter) Find(ctx context.Context, c rail.Client, a rail.Action, stamp string, since time.Time) (rail.Finding, error) {
	var f rail.Finding
	if _, _, err := sik.ParseStamp(stamp); err != nil {
		return f, fmt.Errorf("stripe: find: %w", err)
	}
	if !rail.IsID(a.Subject) {
		return f, fmt.Errorf("stripe: find: subject %q is not a Stripe id", a.Subject)
	}
	// account is the listing of every entity of the kind since, whatever
	// its payment or destination.
	account := url.Values{}
	setSince(account, since)
	var path string
	var subject url.Values // nil: the account's listing is the only one
	switch a.Kind {
	case sik.KindRefund:
		path = "/v1/refunds"
		if strings.HasPrefix(a.Subject, "pi_") {
			subject = url.Values{"payment_intent": {a.Subject}}
		} else {
			subject = url.Values{"charge": {a.Subject}}
		}
	case sik.KindPayout:
		path = "/v1/payouts"
	case sik.KindTransfer:
		path = "/v1/transfers"
		subject = url.Values{"destination": {a.Subject}}
		setSince(subject, since)
	default:
		return f, fmt.Errorf("stripe: find: no %q action", a.Kind)
	}
	if subject != nil {
		f, err := search(ctx, c, path, subject, a, stamp)
		if err != nil || f.Match != nil {
			return f, err
		}
		g, err := search(ctx, c, path, account, a, stamp)
		g.Pages += f.Pages
		if err != nil {
			return g, fmt.Errorf("stripe: find: none listed for %s; the account's listing, unfiltered by it: %w", a.Subject, err)
		}
		return g, nil
	}
	return search(ctx, c, path, account, a, stamp)
}

// search reads the listing path?q to its end, or to the entity stamped
// stamp (its Unlike set against a).
func search(ctx context.Context, c rail.Client, path string, q url.Values, a rail.Action, stamp string) (rail.Finding, error) {
	var f rail.Finding
	want := objectOf[a.Kind]
	cursors := map[string]bool{}
	limit := pageLimit
	for {
		if f.Pages >= maxPages {
			return f, fmt.Errorf("stripe: find %s: gave up after %d pages", path, f.Pages)
		}
		q.Set("limit", strconv.Itoa(limit))
		status, body, err := get(ctx, c, path+"?"+q.Encode())
		if errors.Is(err, errTooLarge) && limit > 1 {
			// Each halving follows a doubling or starts the descent, so
			// oversized answers cost at most one more request per page
			// read, plus log2(pageLimit).
			limit /= 2
			continue
		}
		if err != nil {
			return f, fmt.Errorf("stripe: list %s page %d: %w", path, f.Pages+1, err)
		}
		if status < 200 || status > 299 {
			return f, fmt.Errorf("stripe: list %s page %d: status %d: %s", path, f.Pages+1, status, errorMessage(body))
		}
		var page listPage
		if err := json.Unmarshal(body, &page); err != nil {
			return f, fmt.Errorf("stripe: list %s page %d: undecodable: %w", path, f.Pages+1, err)
		}
		if page.Object != "list" || page.Data == nil || page.HasMore == nil {
			return f, fmt.Errorf("stripe: list %s page %d: not a list (object %q, data or has_more missing)", path, f.Pages+1, page.Object)
		}
		if len(*page.Data) > limit {
			return f, fmt.Errorf("stripe: list %s page %d: %d entities, more than the %d asked for", path, f.Pages+1, len(*page.Data), limit)
		}
		f.Pages++
		limit = min(pageLimit, 2*limit)
		var last string
		for i, raw := range *page.Data {
			e, err := entity(raw, want)
			if err != nil {
				return f, fmt.Errorf("stripe: list %s page %d item %d: %w", path, f.Pages, i, err)
			}
			if e.Stamp == stamp {
				e.Unlike = rail.UnlikeListed[created](raw, a, want)
				f.Match = &e
				f.Exhausted = !*page.HasMore
				return f, nil
			}
			last = e.ID
		}
		if !*page.HasMore {
			f.Exhausted = true
			return f, nil
		}
		if last == "" || cursors[last] {
			return f, fmt.Errorf("stripe: list %s page %d: has_more without progress (cursor %q)", path, f.Pages, last)
		}
		cursors[last] = true
		q.Set("starting_after", last)
	}
}

func setSince(q url.Values, since time.Time) {
	if !since.IsZero() && since.Unix() > 0 {
		q.Set("created[gte]", strconv.FormatInt(since.Unix(), 10))
	}
}

func entity(raw json.RawMessage, want string) (rail.Entity, error) {
	var c created
	if err := json.Unmarshal(raw, &c); err != nil {
		return rail.Entity{}, err
	}
	if c.ID == "" || c.Object != want || c.Amount == nil {
		return rail.Entity{}, fmt.Errorf("not a %s with an id and amount (object %q, id %q)", want, c.Object, c.ID)
	}
	return rail.Entity{
		ID:          c.ID,
		Stamp:       c.stamp(),
		AmountMinor: *c.Amount,
		Currency:    strings.ToUpper(c.Currency),
		Status:      c.Status,
		Created:     time.Unix(c.Created, 0).UTC(),
		Raw:         raw,
	}, nil
}
