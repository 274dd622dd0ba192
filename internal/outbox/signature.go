package outbox

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The headers of a delivery.
const (
	// HeaderEvent is the event type, e.g. intent.applied.
	HeaderEvent = "Countersign-Event"
	// HeaderDelivery is "<outbox_id>-<webhook_id>": the same on every
	// attempt of one event to one webhook. It is not signed (the signature
	// covers the timestamp and the body), so a receiver de-duplicates on
	// the body's "id", the outbox id, which is signed; the webhook half is
	// implied by the secret the body verified under.
	HeaderDelivery = "Countersign-Delivery"
	// HeaderAttempt is the attempt's number (1 for the first).
	HeaderAttempt = "Countersign-Attempt"
	// HeaderTimestamp is the signing time, in Unix seconds.
	HeaderTimestamp = "Countersign-Timestamp"
	// HeaderSignature is "t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
	HeaderSignature = "Countersign-Signature"
)

// DefaultTolerance is how far a signature's timestamp may be from the
// receiver's clock when Verify is given no tolerance.
const DefaultTolerance = 5 * time.Minute

// Errors Verify returns.
var (
	ErrSignatureMalformed = errors.New("outbox: malformed signature header")
	ErrSignatureExpired   = errors.New("outbox: signature timestamp outside the tolerance")
	ErrSignatureMismatch  = errors.New("outbox: signature does not match")
)

// NewSecret returns a fresh webhook signing secret (256 random bits), to
// be shown to the owner once and stored with the webhook.
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("outbox: random: %w", err)
	}
	return "whsec_" + hex.EncodeToString(b[:]), nil
}

// Sign returns the signature header of body signed with secret at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := t.Unix()
	return "t=" + strconv.FormatInt(ts, 10) + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret string, ts int64, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(strconv.FormatInt(ts, 10)))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a Countersign-Signature header against the raw request
// body, as a receiver must before trusting a delivery: the timestamp must be
// within tolerance of now (0 means DefaultTolerance), which bounds replays,
// and one of the v1 signatures must be the HMAC of "<t>.<body>" under
// secret, compared in constant time. Several v1 values are accepted so that
// a secret can be rotated.
func Verify(secret, header string, body []byte, tolerance time.Duration, now time.Time) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	var ts int64
	seenT := false
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%w: %q has no '='", ErrSignatureMalformed, part)
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || seenT {
				return fmt.Errorf("%w: bad or repeated timestamp", ErrSignatureMalformed)
			}
			ts, seenT = n, true
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				return fmt.Errorf("%w: v1 is not a hex SHA-256 MAC", ErrSignatureMalformed)
			}
			sigs = append(sigs, b)
		}
	}
	if !seenT || len(sigs) == 0 {
		return fmt.Errorf("%w: need t= and v1=", ErrSignatureMalformed)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s away from now (tolerance %s)", ErrSignatureExpired,
			time.Unix(ts, 0).UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
	}
	want := mac(secret, ts, body)
	ok := false
	for _, s := range sigs {
		// Check every candidate, so timing does not tell which matched.
		if hmac.Equal(s, want) {
			ok = true
		}
	}
	if !ok {
		return ErrSignatureMismatch
	}
	return nil
}
