package stripe

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// headerDistinct carries the caller's reason for a second identical action.
const headerDistinct = "x-countersign-distinct"

// headers is where every request header stands (README.md). Stripe reads
// Stripe-Account and Stripe-Context to choose whose account a request acts
// on, and Resolve and Find read the platform account: both are refused, on
// reads too. Stripe-Version chooses how Stripe reads the request: Stamp
// pins it to APIVersion on every money-moving request, so the agent's own
// (an SDK sends its version) must only be one well-formed version.
var headers = rail.HeaderPolicy{
	Rules: map[string]rail.HeaderRule{
		"stripe-account":             {Class: rail.HeaderRefused, Why: "it acts on a connected account, which Countersign does not guard"},
		"stripe-context":             {Class: rail.HeaderRefused, Why: "it acts in another account's context, which Countersign does not guard"},
		"stripe-version":             {Class: rail.HeaderPinned, Check: checkVersion},
		"idempotency-key":            {Class: rail.HeaderStamp},
		"content-type":               {Class: rail.HeaderPinned}, // checked against the method in parseAction
		"x-stripe-client-user-agent": {Class: rail.HeaderTransport},
		"x-stripe-client-telemetry":  {Class: rail.HeaderTransport},
	},
	Namespaces: []string{"stripe-", "x-stripe-"},
}

// checkVersion accepts one API version, YYYY-MM-DD with an optional
// release name (2025-08-27.basil); a list or anything else is refused.
func checkVersion(v string) error {
	date, name, dotted := strings.Cut(v, ".")
	ok := len(date) == 10 && date[4] == '-' && date[7] == '-' && (!dotted || name != "")
	for i := 0; ok && i < len(date); i++ {
		ok = i == 4 || i == 7 || date[i] >= '0' && date[i] <= '9'
	}
	for i := 0; ok && i < len(name); i++ {
		ok = name[i] >= 'a' && name[i] <= 'z'
	}
	if !ok {
		return fmt.Errorf("%q is not one Stripe API version (YYYY-MM-DD or YYYY-MM-DD.name)", v)
	}
	return nil
}

// Reversible implements rail.Reverser. A standard payout can be cancelled
// (POST /v1/payouts/{id}/cancel) only while it is pending, not once Stripe
// has sent it (in_transit) or it is paid: reversible for a while, not for
// good. An instant one is paid at once. A transfer is not reversible: Stripe
// reverses one (POST /v1/transfers/{id}/reversals) only while the
// destination account still holds the funds, and a connected account
// that pays out at once leaves nothing to take back (a review's finding:
// a reversible-only grant admitted every transfer). A refund cannot be
// undone. A method other than standard (or none, Stripe's default) is not
// reversible either (fail closed).
func (adapter) Reversible(a rail.Action) bool {
	if a.Kind != sik.KindPayout {
		return false
	}
	method, named := a.Extra["method"]
	return !named || method == "standard"
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
			if err := checkReadQuery(segs, query); err != nil {
				return rail.Parsed{}, err
			}
			return rail.Parsed{Kind: rail.KindRead}, nil
		}
	case http.MethodPost:
		if len(segs) == 2 {
			var kind sik.Kind
			switch segs[1] {
			case "refunds":
				kind = sik.KindRefund
			case "payouts":
				kind = sik.KindPayout
			case "transfers":
				kind = sik.KindTransfer
			}
			if kind != "" {
				a, err := parseAction(kind, query, req)
				if err != nil {
					return rail.Parsed{}, err
				}
				return rail.Parsed{Kind: rail.KindAction, Action: a}, nil
			}
		}
	}
	return rail.Parsed{}, unrecognised(req)
}

func unrecognised(req rail.Request) error {
	return fmt.Errorf("%w: stripe %s %q", rail.ErrUnrecognised, req.Method, req.Path)
}

// splitPath splits "/v1/a/b" into ["v1","a","b"]. Every segment must be
// non-empty [A-Za-z0-9_]: no dot segments, no percent-escapes, no empty
// segments, so the path means the same to Countersign and to the rail.
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

func isRead(segs []string) bool {
	switch len(segs) {
	case 2:
		switch segs[1] {
		case "refunds", "payouts", "transfers", "balance":
			return true
		}
	case 3:
		switch segs[1] {
		case "payment_intents", "charges", "refunds", "payouts", "transfers":
			return true
		}
	}
	return false
}

func malformed(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", rail.ErrMalformed, field, fmt.Sprintf(format, args...))
}

// pair is one name=value of a form body, both decoded.
type pair struct{ name, value string }

// readForm splits a form body as Rack and stripe-mock do: on "&", then at
// the first "=", each side form-decoded (%XX and "+"). What they might read
// otherwise is refused: a ";" (Rack 2 splits queries on it), a piece
// without "=" (Rack reads its value as nil), an empty name, an escape Go
// cannot decode, and bytes that are not UTF-8 once decoded. where names
// the form in refusals ("body", "query").
func readForm(where, body string) ([]pair, error) {
	if body == "" {
		return nil, nil
	}
	if strings.HasPrefix(body, "?") {
		// Some readers (stripe-mock's parser) strip a leading '?' as a
		// query-string marker, so the first name would read differently.
		return nil, malformed(where, "must not begin with '?'")
	}
	pieces := strings.Split(body, "&")
	out := make([]pair, 0, len(pieces))
	for _, piece := range pieces {
		rawName, rawValue, ok := strings.Cut(piece, "=")
		switch {
		case strings.Contains(piece, ";"):
			return nil, malformed(where, "%.40q: a ';' separates parameters for some readers; encode it as %%3B", piece)
		case !ok || rawName == "":
			return nil, malformed(where, "%.40q is not name=value", piece)
		}
		name, err := url.QueryUnescape(rawName)
		if err != nil {
			return nil, malformed(where, "name %.40q: %v", rawName, err)
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, malformed(where, "value of %.40q: %v", name, err)
		}
		if !utf8.ValidString(name) || !utf8.ValidString(value) {
			return nil, malformed(where, "%.40q is not valid UTF-8 once decoded", name)
		}
		out = append(out, pair{name, value})
	}
	return out, nil
}

func parseAction(kind sik.Kind, query string, req rail.Request) (rail.Action, error) {
	if query != "" {
		// Rack merges query parameters into a POST's parameters.
		return rail.Action{}, malformed("query", "a money-moving POST must carry its parameters in the body only")
	}
	// The rail reads the body by its content type: a body sent as JSON,
	// multipart or untyped could carry parameters this form parse does not
	// see, so only a declared form (or no body at all) is accepted.
	if ct := req.Headers["content-type"]; ct != "" || len(req.Body) > 0 {
		if err := rail.CheckMediaType(ct, "application/x-www-form-urlencoded"); err != nil {
			return rail.Action{}, malformed("content-type", "%v", err)
		}
	}
	if !utf8.Valid(req.Body) {
		return rail.Action{}, malformed("body", "not valid UTF-8")
	}
	pairs, err := readForm("body", string(req.Body))
	if err != nil {
		return rail.Action{}, err
	}
	sp := specs[kind]
	f, labels, stamp, err := sp.read(kind, pairs)
	if err != nil {
		return rail.Action{}, err
	}
	distinct := req.Headers[headerDistinct]
	if err := sik.CheckDistinct(distinct); err != nil {
		return rail.Action{}, malformed(headerDistinct, "%s", err)
	}
	a := rail.Action{Kind: kind, Distinct: distinct, Extra: sp.extra(f), Labels: labels, SentStamp: stamp}
	if a.AmountMinor, err = amount(f, kind != sik.KindRefund); err != nil {
		return rail.Action{}, err
	}
	if a.Currency, err = currencyOf(f, kind != sik.KindRefund); err != nil {
		return rail.Action{}, err
	}
	switch kind {
	case sik.KindRefund:
		pi, hasPI := f["payment_intent"]
		ch, hasCh := f["charge"]
		switch {
		case hasPI && hasCh:
			return rail.Action{}, malformed("charge", "send payment_intent or charge, not both")
		case hasPI:
			a.Subject = pi
		case hasCh:
			a.Subject = ch
		default:
			return rail.Action{}, malformed("payment_intent", "a refund needs payment_intent or charge")
		}
	case sik.KindPayout, sik.KindTransfer:
		dest, ok := f["destination"]
		if !ok {
			// A payout without destination goes to the default external
			// account, which a payee allowlist cannot name.
			return rail.Action{}, malformed("destination", "required: Countersign keys payouts and transfers on their destination")
		}
		a.Subject, a.Payee = dest, dest
	}
	return a, nil
}

// amount reads "amount": digits only, no sign, no leading zero, no
// fraction or exponent, at most 2^53-1. Rack-side parsers differ on "+5",
// "010" or " 5"; refusing them leaves no room for two readings.
func amount(f map[string]string, required bool) (*int64, error) {
	v, ok := f["amount"]
	if !ok {
		if required {
			return nil, malformed("amount", "required")
		}
		return nil, nil
	}
	n, err := parseMinor(v)
	if err != nil {
		return nil, malformed("amount", "%q %v", v, err)
	}
	return &n, nil
}

func parseMinor(v string) (int64, error) {
	return rail.ParseUnsigned(v, "a non-negative integer in minor units")
}

func currencyOf(f map[string]string, required bool) (string, error) {
	v, ok := f["currency"]
	if !ok {
		if required {
			return "", malformed("currency", "required")
		}
		return "", nil
	}
	if !isCurrency(v) {
		return "", malformed("currency", "%q is not a three-letter ISO 4217 code", v)
	}
	return strings.ToUpper(v), nil
}

// isCurrency reports whether v is three ASCII letters (either case).
func isCurrency(v string) bool {
	if len(v) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if c := v[i] | 0x20; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}
