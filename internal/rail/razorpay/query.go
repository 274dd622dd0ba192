package razorpay

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/rail"
)

// A read leaves with the account's key and its answer goes to the agent,
// so its query string is read strictly (readQuery) and every member must
// be one its path admits (checkReadQuery). expand is never admitted: a
// payment expanded with card, upi, emi or offers carries the cardholder's
// name, card network, issuer and last digits, which Countersign does not
// hand the agent (found by a review). README.md has the same table.

// maxListCount is Razorpay's largest page (count is 1 to 100).
const maxListCount = 100

// listMembers are the members every list read admits: paging and the
// created_at window.
var listMembers = map[string]func(string) error{
	"count": listCount,
	"skip":  unsigned,
	"from":  unixTime,
	"to":    unixTime,
}

// payoutStatuses are the payout states (RazorpayX payout states and life
// cycle).
var payoutStatuses = []string{"pending", "queued", "scheduled", "processing", "processed", "reversed", "cancelled", "rejected", "failed"}

// payoutListMembers are what GET /v1/payouts admits besides listMembers
// (RazorpayX fetch all payouts). account_number is required there.
var payoutListMembers = map[string]func(string) error{
	"account_number":  idValue,
	"contact_id":      idValue,
	"fund_account_id": idValue,
	"mode":            rail.OneOf(payoutModes...),
	"reference_id":    referenceID,
	"status":          rail.OneOf(payoutStatuses...),
}

// checkReadQuery admits the query of a read on segs (isRead's), or names
// the member it refuses. Lists are GET /v1/refunds, /v1/payments/{id}/refunds
// and /v1/payouts; a read of one object takes no query at all. source is
// the business account a payout list names (account_number), which the
// rails file may restrict as it does a payout's; "" on other reads.
func checkReadQuery(segs []string, query string) (source string, err error) {
	pairs, err := readQuery(query)
	if err != nil {
		return "", err
	}
	payouts := len(segs) == 2 && segs[1] == "payouts"
	list := payouts || len(segs) == 2 && segs[1] == "refunds" ||
		len(segs) == 4 && segs[1] == "payments" && segs[3] == "refunds"
	seen := map[string]bool{}
	for _, p := range pairs {
		name := shown(p.name)
		if base, _, _ := strings.Cut(p.name, "["); base == "expand" {
			return "", malformed(name, "refused on a read: an expanded payment carries what the agent may not see (card: the cardholder's name, network, issuer and last digits; upi, emi, offers), so Countersign admits no expansion")
		}
		if seen[p.name] {
			return "", malformed(name, "sent twice; it must be sent once")
		}
		seen[p.name] = true
		if !list {
			return "", malformed(name, "refused: GET %s takes no query parameters through Countersign", "/"+strings.Join(segs, "/"))
		}
		valid, ok := listMembers[p.name]
		if !ok && payouts {
			valid, ok = payoutListMembers[p.name]
		}
		if !ok {
			return "", malformed(name, "is not a query parameter of GET %s that Countersign admits, so it is refused", listPath(segs))
		}
		if p.value == "" {
			return "", malformed(name, "is empty; omit it or give a value")
		}
		if err := valid(p.value); err != nil {
			return "", malformed(name, "%v", err)
		}
		if payouts && p.name == "account_number" {
			source = p.value
		}
	}
	if payouts && !seen["account_number"] {
		// Razorpay requires it; Countersign does not let the rail choose
		// which business account's payouts a read lists.
		return "", malformed("account_number", "required: GET /v1/payouts lists the payouts of one business account; name it")
	}
	return source, nil
}

func listPath(segs []string) string {
	if segs[1] == "payments" {
		return "/v1/payments/{id}/refunds"
	}
	return "/" + strings.Join(segs, "/")
}

// pair is one name=value of a query, both decoded.
type pair struct{ name, value string }

// readQuery splits a query as PHP does: on "&", then at the first "=",
// each side form-decoded (%XX and "+"). What a reader might take otherwise
// is refused: a leading '?', a ';' (a separator for some readers), a piece
// without "=" or with an empty name, an escape that does not decode (PHP
// keeps it as text, Go refuses it), and bytes that are not UTF-8 once
// decoded.
func readQuery(query string) ([]pair, error) {
	if query == "" {
		return nil, nil
	}
	if strings.HasPrefix(query, "?") {
		return nil, malformed("query", "must not begin with '?'")
	}
	pieces := strings.Split(query, "&")
	out := make([]pair, 0, len(pieces))
	for _, piece := range pieces {
		rawName, rawValue, ok := strings.Cut(piece, "=")
		switch {
		case strings.Contains(piece, ";"):
			return nil, malformed("query", "%.40q: a ';' separates parameters for some readers; encode it as %%3B", piece)
		case !ok || rawName == "":
			return nil, malformed("query", "%.40q is not name=value", piece)
		}
		name, err := url.QueryUnescape(rawName)
		if err != nil {
			return nil, malformed("query", "name %.40q: %v", rawName, err)
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, malformed("query", "value of %s: %v", shown(name), err)
		}
		if !utf8.ValidString(name) || !utf8.ValidString(value) {
			return nil, malformed("query", "%s is not valid UTF-8 once decoded", shown(name))
		}
		out = append(out, pair{name, value})
	}
	return out, nil
}

// shown is a decoded name as a refusal may print it: as sent when it is
// printable ASCII, quoted (at most 40 bytes) otherwise, so a name with
// control bytes cannot shape the message.
func shown(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] <= ' ' || name[i] >= 0x7f || name[i] == '"' {
			return fmt.Sprintf("%.40q", name)
		}
	}
	if len(name) > 40 {
		return fmt.Sprintf("%.40q", name)
	}
	return name
}

// listCount is a page size from 1 to maxListCount.
func listCount(v string) error {
	n, err := parseUnsigned(v)
	if err != nil || n < 1 || n > maxListCount {
		return fmt.Errorf("%.40q is not a page size from 1 to %d", v, maxListCount)
	}
	return nil
}

func unsigned(v string) error {
	if _, err := parseUnsigned(v); err != nil {
		return fmt.Errorf("%.40q %w", v, err)
	}
	return nil
}

// unixTime is a Unix time in seconds.
func unixTime(v string) error {
	if _, err := parseUnsigned(v); err != nil {
		return fmt.Errorf("%.40q is not a Unix time in seconds: %w", v, err)
	}
	return nil
}

// referenceID is a payout's own reference (≤ 40, as on create), without
// control characters.
func referenceID(v string) error {
	if utf8.RuneCountInString(v) > 40 {
		return fmt.Errorf("longer than 40 characters")
	}
	for _, r := range v {
		if r < ' ' || r == 0x7f || r >= 0x80 && r < 0xa0 {
			return fmt.Errorf("holds a control character")
		}
	}
	return nil
}

// parseUnsigned reads digits only: no sign, space or leading zero, at
// most 2^53-1, so PHP and Go read one number.
func parseUnsigned(v string) (int64, error) { return rail.ParseUnsigned(v, "a non-negative integer") }
