package razorpay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
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
	// headerAccount makes a partner act on a sub-merchant's account;
	// Resolve and Find read the key's own account, so such an action could
	// never be reconciled: it is not recognised.
	headerAccount = "x-razorpay-account"
)

const (
	// maxAmount is 2^53-1, the largest amount a SIK can carry exactly.
	maxAmount = 1<<53 - 1
	// maxNotes is Razorpay's limit on notes; one is kept for the stamp.
	maxNotes = 15
	// maxDepth bounds JSON nesting in a request body.
	maxDepth = 32
)

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
		var kind sik.Kind
		switch {
		case len(segs) == 4 && segs[1] == "payments" && segs[3] == "refund":
			kind = sik.KindRefund
		case len(segs) == 2 && segs[1] == "payouts":
			kind = sik.KindPayout
		}
		if kind != "" {
			if req.Headers[headerAccount] != "" {
				return rail.Parsed{}, fmt.Errorf("%w: POST %s on behalf of another account (X-Razorpay-Account) is not supported", rail.ErrUnrecognised, path)
			}
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
		if !isID(s) {
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

// fields is a request body object by exact (case-sensitive) key, as
// Razorpay reads it. Go's struct decoding matches keys case-insensitively
// ("Amount" would fill amount); a map does not.
type fields map[string]json.RawMessage

func parseAction(kind sik.Kind, segs []string, query string, req rail.Request) (rail.Action, error) {
	if query != "" {
		// Razorpay merges query parameters into a request's input.
		return rail.Action{}, malformed("query", "a money-moving POST must carry its parameters in the body only")
	}
	f, err := decodeBody(req)
	if err != nil {
		return rail.Action{}, err
	}
	if err := checkNotes(f); err != nil {
		return rail.Action{}, err
	}
	distinct := req.Headers[headerDistinct]
	if !utf8.ValidString(distinct) {
		return rail.Action{}, malformed(headerDistinct, "not valid UTF-8")
	}
	a := rail.Action{Kind: kind, Distinct: distinct}
	if a.AmountMinor, err = f.amount(kind == sik.KindPayout); err != nil {
		return rail.Action{}, err
	}
	if a.Currency, err = f.currency(kind == sik.KindPayout); err != nil {
		return rail.Action{}, err
	}
	extra := map[string]string{}
	switch kind {
	case sik.KindRefund:
		a.Subject = segs[2] // checked by splitPath
		speed, err := f.str("speed", false)
		if err != nil {
			return rail.Action{}, err
		}
		if speed == "" {
			speed = "normal" // Razorpay's default: absent and "normal" are one refund
		}
		extra["speed"] = speed
	case sik.KindPayout:
		fa, err := f.str("fund_account_id", true)
		if err != nil {
			return rail.Action{}, err
		}
		if !isID(fa) {
			return rail.Action{}, malformed("fund_account_id", "%q is not a Razorpay id", fa)
		}
		a.Subject, a.Payee = fa, fa
		// The source account changes which money moves, and Find needs it.
		acct, err := f.str("account_number", true)
		if err != nil {
			return rail.Action{}, err
		}
		if !isID(acct) {
			return rail.Action{}, malformed("account_number", "%q is not an account number", acct)
		}
		extra["account_number"] = acct
		for _, name := range []string{"mode", "purpose"} {
			v, err := f.str(name, false)
			if err != nil {
				return rail.Action{}, err
			}
			if v != "" {
				extra[name] = v
			}
		}
	}
	a.Extra = extra
	return a, nil
}

// decodeBody checks the content type and reads the body as one JSON
// object. An empty body is an empty object (a full refund).
func decodeBody(req rail.Request) (fields, error) {
	body := bytes.TrimSpace(req.Body)
	ct := req.Headers[headerContentType]
	// Razorpay reads a body as JSON only when it is declared JSON; an
	// untyped or form body would carry parameters this parse does not see.
	if ct != "" || len(body) > 0 {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return nil, malformed("content-type", "%q: Razorpay requests are application/json", ct)
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

// checkJSON accepts exactly one JSON object in valid UTF-8, nested at most
// maxDepth deep, with no key twice in any object. Decoders disagree on a
// repeated key (Go and PHP keep the last, others the first), so a body
// with one cannot be read one way with certainty.
func checkJSON(body []byte) error {
	if !utf8.Valid(body) {
		return malformed("body", "not valid UTF-8")
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	type frame struct {
		obj     bool
		wantKey bool
		path    string
		keys    map[string]bool
		lastKey string
	}
	var stack []*frame
	started := false
	child := func(top *frame) string {
		if top == nil {
			return ""
		}
		if top.obj {
			if top.path == "" {
				return top.lastKey
			}
			return top.path + "." + top.lastKey
		}
		return top.path + "[]"
	}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			if !started || len(stack) > 0 {
				return malformed("body", "truncated JSON")
			}
			return nil
		}
		if err != nil {
			return malformed("body", "not JSON: %v", err)
		}
		if started && len(stack) == 0 {
			return malformed("body", "data after the JSON object")
		}
		if !started && tok != json.Delim('{') {
			return malformed("body", "must be a JSON object")
		}
		started = true
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.wantKey {
			if key, ok := tok.(string); ok {
				if top.keys[key] {
					name := key
					if top.path != "" {
						name = top.path + "." + key
					}
					return malformed(name, "sent twice in one object")
				}
				top.keys[key], top.lastKey, top.wantKey = true, key, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxDepth {
				return malformed("body", "nested deeper than %d", maxDepth)
			}
			stack = append(stack, &frame{obj: tok == json.Delim('{'), wantKey: true, path: child(top), keys: map[string]bool{}})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				top = stack[len(stack)-1]
			} else {
				top = nil
			}
		}
		if top != nil && top.obj {
			top.wantKey = true // a value (scalar or closed container) completed
		}
	}
}

// amount reads "amount": a JSON integer literal (no fraction, exponent or
// sign, not a string), at most 2^53-1. Razorpay's PHP would read 10.5 or
// "100" its own way; refusing leaves no room for two readings.
func (f fields) amount(required bool) (*int64, error) {
	raw, ok := f["amount"]
	if !ok {
		if required {
			return nil, malformed("amount", "required")
		}
		return nil, nil
	}
	s := string(raw)
	switch {
	case s == "null":
		return nil, malformed("amount", "null; omit it for a full refund")
	case strings.HasPrefix(s, `"`):
		return nil, malformed("amount", "%s is a string; send an integer in minor units", s)
	case strings.HasPrefix(s, "-"):
		return nil, malformed("amount", "%s is negative", s)
	case strings.ContainsAny(s, ".eE"):
		return nil, malformed("amount", "%s is not an integer in minor units", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return nil, malformed("amount", "%.40s is not an integer in minor units", s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > maxAmount {
		return nil, malformed("amount", "%.40s is out of range (at most %d)", s, int64(maxAmount))
	}
	return &n, nil
}

// str reads a string field; another JSON type is malformed.
func (f fields) str(name string, required bool) (string, error) {
	raw, ok := f[name]
	if !ok || string(raw) == "null" {
		if required {
			return "", malformed(name, "required")
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", malformed(name, "%.40s is not a string", raw)
	}
	if required && s == "" {
		return "", malformed(name, "required")
	}
	return s, nil
}

func (f fields) currency(required bool) (string, error) {
	v, err := f.str("currency", required)
	if err != nil || v == "" {
		return "", err
	}
	if len(v) != 3 {
		return "", malformed("currency", "%q is not a three-letter ISO 4217 code", v)
	}
	for i := 0; i < 3; i++ {
		if c := v[i] | 0x20; c < 'a' || c > 'z' {
			return "", malformed("currency", "%q is not a three-letter ISO 4217 code", v)
		}
	}
	return strings.ToUpper(v), nil
}

// checkNotes accepts absent, null, [] or an object with room for the
// stamp: ext_proc writes notes.countersign_sik into it.
func checkNotes(f fields) error {
	raw, ok := f["notes"]
	if !ok || string(raw) == "null" {
		return nil
	}
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
		var arr []json.RawMessage
		if json.Unmarshal(t, &arr) != nil || len(arr) > 0 {
			return malformed("notes", "must be an object of key-value pairs")
		}
		return nil
	}
	var notes map[string]json.RawMessage
	if err := json.Unmarshal(raw, &notes); err != nil {
		return malformed("notes", "must be an object of key-value pairs")
	}
	delete(notes, sik.StampKey)
	if len(notes) > maxNotes-1 {
		return malformed("notes", "%d keys; at most %d, as Countersign adds %s", len(notes), maxNotes-1, sik.StampKey)
	}
	return nil
}
