package sik

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Version is the only Action.V this package accepts. Changing how an action
// is keyed means a new version, never a silent change to version 1: every
// SIK already in the ledger depends on it.
const Version = 1

// SIKLen is the length of a SIK: 32 base32 characters carry 160 bits.
const SIKLen = 32

// maxSafeAmount is 2^53-1. JCS writes numbers as IEEE 754 doubles, so a
// larger amount could share a canonical form (and a SIK) with its neighbour.
const maxSafeAmount = 1<<53 - 1

// ErrInvalidAction is wrapped by every error from [Action.Validate].
var ErrInvalidAction = errors.New("sik: invalid action")

// ErrInvalidSIK is wrapped by [ParseSIK] errors.
var ErrInvalidSIK = errors.New("sik: invalid SIK")

// Action is the meaning of one money-moving request: what is hashed into
// its SIK. Every field takes part in the key.
type Action struct {
	V           int               `json:"v"`
	RailAccount string            `json:"rail_account"`
	Action      string            `json:"action"`
	Subject     string            `json:"subject"`
	AmountMinor int64             `json:"amount_minor"`
	Currency    string            `json:"currency"`
	Extra       map[string]string `json:"extra"`
	Window      string            `json:"window"`
	Distinct    string            `json:"distinct"`
}

// Validate reports every problem with a, each naming its JSON field.
func (a Action) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidAction}, args...)...))
	}
	if a.V != Version {
		bad("v is %d, want %d", a.V, Version)
	}
	for _, f := range []struct{ name, value string }{
		{"rail_account", a.RailAccount},
		{"action", a.Action},
		{"subject", a.Subject},
	} {
		switch {
		case f.value == "":
			bad("%s is empty", f.name)
		case !utf8.ValidString(f.value):
			bad("%s is not valid UTF-8", f.name)
		case strings.TrimSpace(f.value) != f.value:
			// " pay_1" and "pay_1" would otherwise key two intents for one payment.
			bad("%s %q has leading or trailing whitespace", f.name, f.value)
		}
	}
	if a.AmountMinor < 0 {
		bad("amount_minor is negative (%d)", a.AmountMinor)
	} else if a.AmountMinor > maxSafeAmount {
		bad("amount_minor %d exceeds 2^53-1, which JSON numbers cannot hold exactly", a.AmountMinor)
	}
	if !isCurrency(a.Currency) {
		bad("currency %q is not three upper-case letters (ISO 4217)", a.Currency)
	}
	for _, k := range slices.Sorted(maps.Keys(a.Extra)) { // sorted: stable messages
		v := a.Extra[k]
		switch {
		case k == "":
			bad("extra has an empty key")
		case !utf8.ValidString(k):
			bad("extra key %q is not valid UTF-8", k)
		case !utf8.ValidString(v):
			bad("extra[%q] is not valid UTF-8", k)
		}
	}
	if !utf8.ValidString(a.Window) {
		bad("window is not valid UTF-8")
	}
	if a.Action == string(KindRefund) && a.Window != "" {
		bad("window must be empty for a refund (got %q): refunds have no time window; set distinct to make a second identical refund", a.Window)
	}
	if err := CheckDistinct(a.Distinct); err != nil {
		bad("distinct %s", err)
	}
	return errors.Join(errs...)
}

// MaxDistinct is the longest distinct reason, in characters (the native
// API's bound on ProposedAction.distinct).
const MaxDistinct = 500

// CheckDistinct says why s cannot be a distinct reason, or nil. The reason
// is shown to the owner verbatim (approvals, audit): it must be valid UTF-8
// and hold no control or format character, since a right-to-left override
// or a zero-width character would make it, and what follows it on the
// owner's screen, read otherwise. It is at most MaxDistinct characters,
// as the native API's field is: the reason is written into the intent, its
// canonical form and its audit record, so an agent sending it through
// Envoy (whose header bound is 60 KiB) would otherwise choose the size of
// three rows per decision (found by a review: 251 KiB of WAL a decision).
// Rail parsers call it on the header, so what they accept can be keyed.
func CheckDistinct(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > MaxDistinct {
		return fmt.Errorf("is %d characters long; a reason is at most %d", n, MaxDistinct)
	}
	if i := strings.IndexFunc(s, invisible); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Errorf("holds the invisible character U+%04X at byte %d; a reason must read as it is written", r, i)
	}
	return nil
}

// invisible is what a distinct reason, one line, may not hold: every
// control character (line breaks too) and every Hidden one.
func invisible(r rune) bool { return unicode.Is(unicode.Cc, r) || Hidden(r) }

// Hidden reports whether r changes or hides how text reads without being
// seen: a control character other than tab, line feed and carriage
// return; a format character (bidirectional overrides and isolates,
// zero-width characters, the soft hyphen, tag characters); a private-use
// character; a line or paragraph separator; a variation selector; or any
// other default-ignorable code point (Hangul fillers, U+034F, …), and the
// Braille blank. Browsers
// draw most of these as nothing, so text an owner approves could carry, in
// them, what the owner never saw (a card number after "T-77").
func Hidden(r rune) bool {
	switch r {
	case '\t', '\n', '\r':
		return false
	case '\u2800': // Braille blank: an empty cell, however many
		return true
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Zl, unicode.Zp,
		unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point)
}

// CheckShown says why s cannot be shown to an owner as it is written
// (valid UTF-8 without a Hidden character), or nil.
func CheckShown(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	if i := strings.IndexFunc(s, Hidden); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Errorf("holds the invisible character U+%04X at byte %d; what Countersign shows its owner must read as it is written", r, i)
	}
	return nil
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// Canonical returns the RFC 8785 form of a that Key hashes. A nil Extra is
// written as {}, as an empty one is (they mean the same).
func (a Action) Canonical() ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return appendCanonical(make([]byte, 0, 256), a), nil
}

// SIK is a semantic idempotency key: 32 characters of RFC 4648 base32
// (A–Z, 2–7), upper case, no padding.
type SIK string

var sikEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// Key returns the SIK of a, or the validation error.
func Key(a Action) (SIK, error) {
	_, s, err := a.Keyed()
	return s, err
}

// Keyed returns a's canonical form and its SIK, canonicalising once.
func (a Action) Keyed() (canonical []byte, s SIK, err error) {
	canon, err := a.Canonical()
	if err != nil {
		return nil, "", err
	}
	return canon, KeyOfCanonical(canon), nil
}

// KeyOfCanonical is the SIK of an action's canonical form.
func KeyOfCanonical(canon []byte) SIK {
	sum := sha256.Sum256(canon)
	return SIK(sikEncoding.EncodeToString(sum[:])[:SIKLen])
}

// Valid reports whether s has the exact shape of a SIK.
func (s SIK) Valid() bool {
	if len(s) != SIKLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isBase32(s[i]) {
			return false
		}
	}
	return true
}

func isBase32(c byte) bool { return (c >= 'A' && c <= 'Z') || (c >= '2' && c <= '7') }

// String returns the SIK as text.
func (s SIK) String() string { return string(s) }

// ParseSIK checks that s is a SIK. It does not normalise case: a SIK is
// compared byte for byte in the ledger, so "abc…" is refused, not repaired.
func ParseSIK(s string) (SIK, error) {
	if len(s) != SIKLen {
		return "", fmt.Errorf("%w: length %d, want %d", ErrInvalidSIK, len(s), SIKLen)
	}
	for i := 0; i < len(s); i++ {
		if !isBase32(s[i]) {
			return "", fmt.Errorf("%w: byte 0x%02x at offset %d is not in the base32 alphabet A-Z2-7", ErrInvalidSIK, s[i], i)
		}
	}
	return SIK(s), nil
}
