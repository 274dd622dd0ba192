package razorpay

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// headerDistinct carries the caller's reason for a second identical action.
const headerDistinct = "x-countersign-distinct"

const (
	// maxAmount is 2^53-1, the largest amount a SIK can carry exactly.
	maxAmount = 1<<53 - 1
	// maxDepth bounds JSON nesting in a request body.
	maxDepth = 32
)

// headers is where every request header stands (README.md). A partner's
// X-Razorpay-Account makes the request act on a sub-merchant's account,
// while Resolve and Find read the key's own: it is refused, on reads too.
var headers = rail.HeaderPolicy{
	Rules: map[string]rail.HeaderRule{
		"x-razorpay-account":     {Class: rail.HeaderRefused, Why: "it acts on another merchant's account, which Countersign does not guard"},
		"x-refund-idempotency":   {Class: rail.HeaderStamp},
		"x-payout-idempotency":   {Class: rail.HeaderStamp},
		"x-transfer-idempotency": {Class: rail.HeaderStamp},
		"content-type":           {Class: rail.HeaderPinned}, // checked in decodeBody
	},
	Namespaces: []string{"x-razorpay-"},
}

// Parse implements rail.Adapter.
func (adapter) Parse(req rail.Request) (rail.Parsed, error) {
	path, query, _ := strings.Cut(req.Path, "?")
	segs, ok := splitPath(path)
	if !ok {
		return rail.Parsed{}, unrecognised(req)
	}
	if err := headers.Check(req.Headers); err != nil {
		return rail.Parsed{}, err
	}
	switch req.Method {
	case http.MethodGet:
		if isRead(segs) {
			if len(req.Body) > 0 {
				return rail.Parsed{}, malformed("body", "a read carries no body")
			}
			source, err := checkReadQuery(segs, query)
			if err != nil {
				return rail.Parsed{}, err
			}
			return rail.Parsed{Kind: rail.KindRead, ReadSource: source}, nil
		}
	case http.MethodPost:
		var kind sik.Kind
		switch {
		case len(segs) == 4 && segs[1] == "payments" && segs[3] == "refund":
			kind = sik.KindRefund
		case len(segs) == 2 && segs[1] == "payouts":
			kind = sik.KindPayout
		}
		if kind != "" {
			a, err := parseAction(kind, segs, query, req)
			if err != nil {
				return rail.Parsed{}, err
			}
			return rail.Parsed{Kind: rail.KindAction, Action: a}, nil
		}
	}
	return rail.Parsed{}, unrecognised(req)
}

func unrecognised(req rail.Request) error {
	return fmt.Errorf("%w: razorpay %s %q", rail.ErrUnrecognised, req.Method, req.Path)
}

// splitPath splits "/v1/a/b" into ["v1","a","b"]; every segment must be
// non-empty [A-Za-z0-9_], so the path means the same here and at the rail.
func splitPath(path string) ([]string, bool) {
	if !strings.HasPrefix(path, "/v1/") {
		return nil, false
	}
	segs := strings.Split(path[1:], "/")
	for _, s := range segs {
		if !rail.IsID(s) {
			return nil, false
		}
	}
	return segs, true
}

// isRead: GET /v1/payments/{id}, /v1/payments/{id}/refunds[/{rid}],
// /v1/refunds[/{id}], /v1/payouts[/{id}].
func isRead(segs []string) bool {
	switch {
	case len(segs) == 3 && segs[1] == "payments":
		return true
	case (len(segs) == 4 || len(segs) == 5) && segs[1] == "payments" && segs[3] == "refunds":
		return true
	case (len(segs) == 2 || len(segs) == 3) && (segs[1] == "refunds" || segs[1] == "payouts"):
		return true
	}
	return false
}

func malformed(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", rail.ErrMalformed, field, fmt.Sprintf(format, args...))
}

// fields is a request body object by exact (case-sensitive) key, as
// Razorpay reads it. Go's struct decoding matches keys case-insensitively
// ("Amount" would fill amount); a map does not.
type fields map[string]json.RawMessage

func parseAction(kind sik.Kind, segs []string, query string, req rail.Request) (rail.Action, error) {
	if query != "" {
		// Razorpay merges query parameters into a request's input.
		return rail.Action{}, malformed("query", "a money-moving POST must carry its parameters in the body only")
	}
	body, err := decodeBody(req)
	if err != nil {
		return rail.Action{}, err
	}
	sp := specs[kind]
	f, labels, err := sp.read(kind, body)
	if err != nil {
		return rail.Action{}, err
	}
	distinct := req.Headers[headerDistinct]
	if err := sik.CheckDistinct(distinct); err != nil {
		return rail.Action{}, malformed(headerDistinct, "%s", err)
	}
	a := rail.Action{Kind: kind, Distinct: distinct, Extra: sp.extra(f), Labels: labels, SentStamp: f[sik.RazorpayBodyField]}
	if v, ok := f["amount"]; ok {
		n, err := amount(v)
		if err != nil {
			return rail.Action{}, err
		}
		a.AmountMinor = &n
	}
	if err := sp.missing(f, "amount", "currency", "fund_account_id", "account_number", "mode", "purpose"); err != nil {
		return rail.Action{}, err
	}
	a.Currency = strings.ToUpper(f["currency"])
	if kind == sik.KindRefund {
		a.Subject = segs[2] // checked by splitPath
	} else {
		a.Subject, a.Payee = f["fund_account_id"], f["fund_account_id"]
	}
	return a, nil
}

// decodeBody checks the content type and reads the body as one JSON
// object. An empty body is an empty object (a full refund).
func decodeBody(req rail.Request) (fields, error) {
	body := rail.TrimJSONSpace(req.Body)
	ct := req.Headers["content-type"]
	// Razorpay reads a body as JSON only when it is declared JSON; an
	// untyped or form body would carry parameters this parse does not see.
	if ct != "" || len(body) > 0 {
		if err := rail.CheckMediaType(ct, "application/json"); err != nil {
			return nil, malformed("content-type", "%v", err)
		}
	}
	if len(body) == 0 {
		return fields{}, nil
	}
	if err := checkJSON(body); err != nil {
		return nil, err
	}
	var f fields
	if err := json.Unmarshal(body, &f); err != nil { // unreachable after checkJSON
		return nil, malformed("body", "%v", err)
	}
	return f, nil
}

// checkJSON accepts exactly one JSON object under rail.CheckStrictJSON's
// rules. Decoders disagree on a repeated key (Go and PHP keep the last,
// others the first), so a body with one cannot be read one way with
// certainty. Names are compared exactly, as Razorpay (PHP) and the fields
// map read them; a name in another case is refused later, as a member
// spec.read does not know or a notes key rail.KeySet refuses.
func checkJSON(body []byte) error {
	err := rail.CheckStrictJSON(body, rail.StrictJSON{Object: true, MaxDepth: maxDepth, ExactNames: true})
	var e *rail.JSONError
	if !errors.As(err, &e) {
		return err
	}
	return malformed(e.Field(), "%s", e.Detail())
}

// amount reads "amount": a JSON integer literal (no fraction, exponent or
// sign, not a string), from 1 to 2^53-1. Razorpay's PHP would read 10.5 or
// "100" its own way; refusing leaves no room for two readings.
func amount(s string) (int64, error) {
	switch {
	case strings.HasPrefix(s, `"`):
		return 0, malformed("amount", "%.40s is a string; send an integer in minor units", s)
	case strings.HasPrefix(s, "-"):
		return 0, malformed("amount", "%.40s is negative", s)
	case strings.ContainsAny(s, ".eE"):
		return 0, malformed("amount", "%.40s is not an integer in minor units", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, malformed("amount", "%.40s is not an integer in minor units", s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > maxAmount {
		return 0, malformed("amount", "%.40s is out of range (at most %d)", s, int64(maxAmount))
	}
	if n < 1 {
		return 0, malformed("amount", "must be at least 1; omit it for a full refund")
	}
	return n, nil
}
