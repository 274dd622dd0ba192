package stripe

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// Request headers Parse reads (rail.Request headers are lower-case).
const (
	headerDistinct    = "x-countersign-distinct"
	headerContentType = "content-type"
	// headerAccount makes a request act on a Connect account. Resolve and
	// Find read the platform account, so such an action could never be
	// reconciled: it is not recognised.
	headerAccount = "stripe-account"
)

// maxAmount is 2^53-1, the largest amount a SIK can carry exactly.
const maxAmount = 1<<53 - 1

// maxMetadataKeys is Stripe's limit; one key is kept for countersign_sik.
const maxMetadataKeys = 50

// Fields each action reads. Each must appear at most once and only in its
// plain form: Stripe (Rack) reads "amount[]" or "amount[x]" as an array or
// hash, and a repeated key as its last value; Parse would have to guess
// which value the rail uses, so it refuses instead.
var actionFields = map[sik.Kind][]string{
	sik.KindRefund:   {"payment_intent", "charge", "amount", "currency", "reason", "refund_application_fee", "reverse_transfer"},
	sik.KindPayout:   {"amount", "currency", "destination", "method", "source_type"},
	sik.KindTransfer: {"amount", "currency", "destination", "source_transaction"},
}

// Parse implements rail.Adapter.
func (adapter) Parse(req rail.Request) (rail.Parsed, error) {
	path, query, _ := strings.Cut(req.Path, "?")
	segs, ok := splitPath(path)
	if !ok {
		return rail.Parsed{}, unrecognised(req)
	}
	switch req.Method {
	case http.MethodGet:
		if isRead(segs) {
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
				if req.Headers[headerAccount] != "" {
					return rail.Parsed{}, fmt.Errorf("%w: POST %s on behalf of a Connect account (Stripe-Account) is not supported", rail.ErrUnrecognised, path)
				}
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
		if !isID(s) {
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

// isID reports whether s is a plausible Stripe id or path segment.
func isID(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !idByte(s[i]) {
			return false
		}
	}
	return true
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func malformed(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", rail.ErrMalformed, field, fmt.Sprintf(format, args...))
}

// form is a parsed body whose action fields are known to be single-valued.
type form url.Values

func (f form) get(name string) (string, bool) {
	v, ok := f[name]
	if !ok {
		return "", false
	}
	return v[0], true
}

func parseAction(kind sik.Kind, query string, req rail.Request) (rail.Action, error) {
	if query != "" {
		// Rack merges query parameters into a POST's parameters.
		return rail.Action{}, malformed("query", "a money-moving POST must carry its parameters in the body only")
	}
	// The rail reads the body by its content type: a body sent as JSON,
	// multipart or untyped could carry parameters this form parse does not
	// see, so only a declared form (or no body at all) is accepted.
	if ct := req.Headers[headerContentType]; ct != "" || len(req.Body) > 0 {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/x-www-form-urlencoded" {
			return rail.Action{}, malformed("content-type", "%q: Stripe requests are application/x-www-form-urlencoded", ct)
		}
	}
	if !utf8.Valid(req.Body) {
		return rail.Action{}, malformed("body", "not valid UTF-8")
	}
	values, err := url.ParseQuery(string(req.Body))
	if err != nil {
		return rail.Action{}, malformed("body", "not a form: %v", err)
	}
	f := form(values)
	if err := checkFields(kind, f); err != nil {
		return rail.Action{}, err
	}
	distinct := req.Headers[headerDistinct]
	if !utf8.ValidString(distinct) {
		return rail.Action{}, malformed(headerDistinct, "not valid UTF-8")
	}
	a := rail.Action{Kind: kind, Distinct: distinct}
	if a.AmountMinor, err = amount(f, kind != sik.KindRefund); err != nil {
		return rail.Action{}, err
	}
	if a.Currency, err = currency(f, kind != sik.KindRefund); err != nil {
		return rail.Action{}, err
	}
	extra := map[string]string{}
	switch kind {
	case sik.KindRefund:
		pi, hasPI := f.get("payment_intent")
		ch, hasCh := f.get("charge")
		switch {
		case hasPI && hasCh:
			return rail.Action{}, malformed("charge", "send payment_intent or charge, not both")
		case hasPI:
			a.Subject, err = id("payment_intent", pi)
		case hasCh:
			a.Subject, err = id("charge", ch)
		default:
			return rail.Action{}, malformed("payment_intent", "a refund needs payment_intent or charge")
		}
		if err != nil {
			return rail.Action{}, err
		}
		copyExtra(f, extra, "reason", "refund_application_fee", "reverse_transfer")
	case sik.KindPayout, sik.KindTransfer:
		dest, ok := f.get("destination")
		if !ok {
			// A payout without destination goes to the default external
			// account, which a payee allowlist cannot name.
			return rail.Action{}, malformed("destination", "required: Countersign keys payouts and transfers on their destination")
		}
		if a.Subject, err = id("destination", dest); err != nil {
			return rail.Action{}, err
		}
		a.Payee = a.Subject
		if kind == sik.KindPayout {
			// Stripe's default method is standard: absent and explicit
			// standard are the same payout.
			extra["method"] = "standard"
			copyExtra(f, extra, "method", "source_type")
		} else {
			copyExtra(f, extra, "source_transaction")
		}
	}
	if len(extra) > 0 {
		a.Extra = extra
	}
	return a, nil
}

// checkFields refuses repeated or bracketed action fields and metadata
// that leaves no room for the stamp.
func checkFields(kind sik.Kind, f form) error {
	fields := actionFields[kind]
	metadata := 0
	for key, vs := range f {
		base, _, bracketed := strings.Cut(key, "[")
		for _, name := range fields {
			if base != name {
				continue
			}
			if bracketed {
				return malformed(name, "sent as %q; it must be a plain value", key)
			}
			if len(vs) > 1 {
				return malformed(name, "sent %d times; it must be sent once", len(vs))
			}
		}
		if base == "metadata" && bracketed && key != sik.StripeBodyField {
			metadata++
		}
	}
	if metadata > maxMetadataKeys-1 {
		return malformed("metadata", "%d keys; at most %d, as Countersign adds %s", metadata, maxMetadataKeys-1, sik.StampKey)
	}
	return nil
}

func copyExtra(f form, extra map[string]string, names ...string) {
	for _, n := range names {
		if v, ok := f.get(n); ok && v != "" {
			extra[n] = v
		}
	}
}

func id(field, v string) (string, error) {
	if !isID(v) {
		return "", malformed(field, "%q is not a Stripe id", v)
	}
	return v, nil
}

// amount reads "amount": digits only, no sign, no leading zero, no
// fraction or exponent, at most 2^53-1. Rack-side parsers differ on "+5",
// "010" or " 5"; refusing them leaves no room for two readings.
func amount(f form, required bool) (*int64, error) {
	v, ok := f.get("amount")
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
	if v == "" {
		return 0, fmt.Errorf("is empty")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, fmt.Errorf("is not a non-negative integer in minor units")
		}
	}
	if len(v) > 1 && v[0] == '0' {
		return 0, fmt.Errorf("has a leading zero")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > maxAmount {
		return 0, fmt.Errorf("is out of range (at most %d)", int64(maxAmount))
	}
	return n, nil
}

func currency(f form, required bool) (string, error) {
	v, ok := f.get("currency")
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
