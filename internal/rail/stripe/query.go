package stripe

import (
	"fmt"
	"strings"

	"github.com/countersign/countersign/internal/rail"
)

// A read leaves with the account's secret key and its answer goes to the
// agent, so its query string is read as strictly as a money-moving body
// (readForm) and every member must be one its path admits (readQuery).
// expand is never admitted: an expanded PaymentIntent (a charge's or a
// refund's payment_intent) carries its client_secret, which Stripe says
// only the paying customer may see and which, with the account's
// publishable key, confirms the PaymentIntent without Countersign (found
// by a review). README.md has the same table.

// maxListLimit is Stripe's largest page (limit is 1 to 100).
const maxListLimit = 100

// listMembers are the members every list read admits: paging.
var listMembers = map[string]func(string) error{
	"limit":          listLimit,
	"starting_after": idValue,
	"ending_before":  idValue,
}

// readQuery is what each read path admits besides paging (lists) or
// nothing at all (one object, the balance). A range filter (created,
// arrival_date) is written plainly (an exact time) or as name[gt|gte|lt|lte].
var readQuery = map[string]struct {
	list    bool
	members map[string]func(string) error
	ranges  []string
}{
	"refunds": {list: true, members: map[string]func(string) error{"payment_intent": idValue, "charge": idValue},
		ranges: []string{"created"}},
	"payouts": {list: true, members: map[string]func(string) error{"destination": idValue,
		"status": rail.OneOf("pending", "paid", "failed", "canceled", "in_transit")},
		ranges: []string{"created", "arrival_date"}},
	"transfers": {list: true, members: map[string]func(string) error{"destination": idValue, "transfer_group": rail.MaxLen(5000)},
		ranges: []string{"created"}},
}

// checkReadQuery admits the query of a read on segs (isRead's), or names
// the member it refuses.
func checkReadQuery(segs []string, query string) error {
	pairs, err := readForm("query", query)
	if err != nil || len(pairs) == 0 {
		return err
	}
	q, known := readQuery[segs[1]]
	list := known && q.list && len(segs) == 2
	seen := map[string]bool{}
	ranged := map[string]bool{}
	for _, p := range pairs {
		if base := baseName(p.name); base == "expand" {
			return malformed(p.name, "refused on a read: an expanded object can carry what the agent may not see (a PaymentIntent's client_secret), so Countersign admits no expansion; read the object by its own path")
		}
		if seen[p.name] {
			return malformed(p.name, "%q sent twice; it must be sent once", p.name)
		}
		seen[p.name] = true
		if !list {
			return malformed(p.name, "refused: GET %s takes no query parameters through Countersign", "/"+strings.Join(segs, "/"))
		}
		valid, ok := listMembers[p.name]
		if !ok {
			valid, ok = q.members[p.name]
		}
		if !ok {
			base, op := rangeOf(p.name)
			if !contains(q.ranges, base) || op == "!" {
				return malformed(p.name, "is not a query parameter of GET /v1/%s that Countersign admits, so it is refused", segs[1])
			}
			// created=… and created[gte]=… together: Rack cannot hold
			// both, so which one the rail reads is a guess.
			if ranged[base] && op == "" || seen[base] && op != "" {
				return malformed(base, "sent both as an exact value and as a range; send one")
			}
			ranged[base] = true
			valid = unixTime
		}
		if p.value == "" {
			return malformed(p.name, "is empty; omit it or give a value")
		}
		if err := valid(p.value); err != nil {
			return malformed(p.name, "%v", err)
		}
	}
	return nil
}

// rangeOf splits "created[gte]" into ("created", "gte"), "created" into
// ("created", ""); op is "!" for any other bracketed spelling.
func rangeOf(name string) (base, op string) {
	base, rest, bracketed := strings.Cut(name, "[")
	if !bracketed {
		return base, ""
	}
	switch rest {
	case "gt]", "gte]", "lt]", "lte]":
		return base, strings.TrimSuffix(rest, "]")
	}
	return base, "!"
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func listLimit(v string) error {
	n, err := parseMinor(v)
	if err != nil || n < 1 || n > maxListLimit {
		return fmt.Errorf("%q is not a page size from 1 to %d", v, maxListLimit)
	}
	return nil
}

// unixTime is a Unix timestamp in seconds: digits, no sign, no leading
// zero.
func unixTime(v string) error {
	if _, err := parseMinor(v); err != nil {
		return fmt.Errorf("%q is not a Unix time in seconds: %w", v, err)
	}
	return nil
}
