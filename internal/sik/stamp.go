package sik

import (
	"errors"
	"fmt"
	"strconv"
)

// Rail names a payment rail.
type Rail string

// Rails with idempotency stamps.
const (
	RailStripe   Rail = "stripe"
	RailRazorpay Rail = "razorpay"
)

// Kind is the kind of money movement; it selects the header on rails that
// use a different header per endpoint (Razorpay).
type Kind string

// Kinds of money movement.
const (
	KindRefund   Kind = "refund"
	KindPayout   Kind = "payout"
	KindTransfer Kind = "transfer"
)

// Idempotency headers.
const (
	HeaderStripe           = "Idempotency-Key"        // ≤255 chars
	HeaderRazorpayRefund   = "X-Refund-Idempotency"   // ≥10 chars of [A-Za-z0-9_-]
	HeaderRazorpayPayout   = "X-Payout-Idempotency"   // 4–36 chars of [A-Za-z0-9_ -]
	HeaderRazorpayTransfer = "X-Transfer-Idempotency" // 4–36 chars of [A-Za-z0-9_ -]
)

// Body stamps: neither rail shows the idempotency key on the created object,
// so the stamp is also written where it comes back in listings.
const (
	// StampKey is the metadata (Stripe) or notes (Razorpay) key.
	StampKey = "countersign_sik"
	// StripeBodyField is the form field that sets metadata.countersign_sik.
	StripeBodyField = "metadata[" + StampKey + "]"
	// RazorpayBodyField is the JSON path of notes.countersign_sik.
	RazorpayBodyField = "notes." + StampKey
)

// Stamp encoding: generation 0 is the bare SIK (32 chars); generation g ≥ 1
// is SIK + "-" + g in lower-case base36 without leading zeros. The tightest
// limit, Razorpay's 36 chars, leaves 4 chars: "-" and 3 base36 digits.
const (
	stampSep = '-'
	// MaxGeneration is the highest generation that fits every rail (zzz₃₆).
	MaxGeneration uint32 = 36*36*36 - 1
	// MaxStampLen is the longest stamp: 32 + len("-zzz").
	MaxStampLen = SIKLen + 4
)

// Errors from the stamp functions, always wrapped with detail.
var (
	ErrGenerationTooLarge = errors.New("sik: stamp generation does not fit the rails' key limits")
	ErrInvalidStamp       = errors.New("sik: invalid stamp")
	ErrUnknownRail        = errors.New("sik: unknown rail")
	ErrUnsupportedKind    = errors.New("sik: rail has no idempotency header for this kind")
)

// Stamp returns the idempotency value for sik at generation gen. It fails
// rather than truncates when gen exceeds MaxGeneration: a truncated stamp
// would collide with an earlier generation's key.
func Stamp(sik SIK, gen uint32) (string, error) {
	if !sik.Valid() {
		return "", fmt.Errorf("%w: %q", ErrInvalidSIK, string(sik))
	}
	if gen > MaxGeneration {
		return "", fmt.Errorf("%w: generation %d > %d", ErrGenerationTooLarge, gen, MaxGeneration)
	}
	if gen == 0 {
		return string(sik), nil
	}
	return string(sik) + string(stampSep) + strconv.FormatUint(uint64(gen), 36), nil
}

// ParseStamp inverts [Stamp]. Only the exact output of Stamp is accepted
// (no upper-case or zero-padded generation), so each stamp has one meaning
// for the reconciler, which matches rail objects on the stamp alone.
func ParseStamp(value string) (SIK, uint32, error) {
	if len(value) < SIKLen {
		return "", 0, fmt.Errorf("%w: length %d, want %d to %d", ErrInvalidStamp, len(value), SIKLen, MaxStampLen)
	}
	sik, err := ParseSIK(value[:SIKLen])
	if err != nil {
		return "", 0, fmt.Errorf("%w: %w", ErrInvalidStamp, err)
	}
	rest := value[SIKLen:]
	if rest == "" {
		return sik, 0, nil
	}
	if len(value) > MaxStampLen {
		return "", 0, fmt.Errorf("%w: length %d, want %d to %d", ErrInvalidStamp, len(value), SIKLen, MaxStampLen)
	}
	if rest[0] != stampSep || len(rest) < 2 {
		return "", 0, fmt.Errorf("%w: want %q and a generation after the SIK, got %q", ErrInvalidStamp, stampSep, rest)
	}
	digits := rest[1:]
	if digits[0] == '0' {
		return "", 0, fmt.Errorf("%w: generation %q has a leading zero", ErrInvalidStamp, digits)
	}
	for i := 0; i < len(digits); i++ {
		if c := digits[i]; (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return "", 0, fmt.Errorf("%w: generation %q is not lower-case base36", ErrInvalidStamp, digits)
		}
	}
	gen, err := strconv.ParseUint(digits, 36, 32)
	if err != nil { // unreachable: at most 3 validated digits
		return "", 0, fmt.Errorf("%w: generation %q: %w", ErrInvalidStamp, digits, err)
	}
	return sik, uint32(gen), nil
}

// HeaderStamp returns the idempotency header name and value for a request
// of kind on rail, for sik at generation gen.
func HeaderStamp(rail Rail, kind Kind, sik SIK, gen uint32) (header, value string, err error) {
	header, err = headerName(rail, kind)
	if err != nil {
		return "", "", err
	}
	value, err = Stamp(sik, gen)
	if err != nil {
		return "", "", err
	}
	return header, value, nil
}

func headerName(rail Rail, kind Kind) (string, error) {
	switch rail {
	case RailStripe:
		switch kind {
		case KindRefund, KindPayout, KindTransfer:
			return HeaderStripe, nil
		}
	case RailRazorpay:
		switch kind {
		case KindRefund:
			return HeaderRazorpayRefund, nil
		case KindPayout:
			return HeaderRazorpayPayout, nil
		case KindTransfer:
			return HeaderRazorpayTransfer, nil
		}
	default:
		return "", fmt.Errorf("%w: %q", ErrUnknownRail, string(rail))
	}
	return "", fmt.Errorf("%w: rail %q, kind %q", ErrUnsupportedKind, string(rail), string(kind))
}

// BodyStamp returns the body field that carries the stamp on rail and its
// value, which is the same value as the header stamp so that [ParseStamp]
// reads both.
func BodyStamp(rail Rail, sik SIK, gen uint32) (field, value string, err error) {
	switch rail {
	case RailStripe:
		field = StripeBodyField
	case RailRazorpay:
		field = RazorpayBodyField
	default:
		return "", "", fmt.Errorf("%w: %q", ErrUnknownRail, string(rail))
	}
	value, err = Stamp(sik, gen)
	if err != nil {
		return "", "", err
	}
	return field, value, nil
}
