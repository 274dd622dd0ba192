package mandate

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/sik"
)

// ErrNotCanonical means stored bytes are not the canonical form of any
// mandate: they were changed outside this package.
var ErrNotCanonical = errors.New("mandate: not a canonical mandate")

var hashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidHash reports whether s has the shape of a mandate hash.
func ValidHash(s string) bool { return hashPattern.MatchString(s) }

// Canonical returns the canonical form of m: the RFC 8785 canonical JSON of
// its protojson encoding (proto field names, unpopulated fields left out),
// after putting set-like lists in a fixed order and dropping empty optional
// sections, so that the same policy always has the same bytes. m itself is
// not changed.
func Canonical(m *countersignv1.Mandate) ([]byte, error) {
	if m == nil {
		return nil, errors.New("mandate: canonical form of a nil mandate")
	}
	n := cloneNormalized(m)
	j, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false}.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("mandate: protojson: %w", err)
	}
	c, err := sik.Canonicalize(j)
	if err != nil {
		return nil, fmt.Errorf("mandate: canonical JSON: %w", err)
	}
	return c, nil
}

// Hash is the mandate's identity: the lower-case hex SHA-256 of
// [Canonical]. It identifies the policy, so any change to what a mandate
// permits gives a new hash, which is a new mandate.
func Hash(m *countersignv1.Mandate) (string, error) {
	c, err := Canonical(m)
	if err != nil {
		return "", err
	}
	return HashCanonical(c), nil
}

// HashCanonical is the hash of already-canonical bytes (as stored).
func HashCanonical(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// FromCanonical turns stored canonical bytes back into the mandate. It
// refuses bytes that are not exactly the canonical form of what they decode
// to, so a stored mandate edited by hand cannot pass for the one its hash
// names. It does not re-run validation: a mandate is judged by the rules in
// force when it was created (call [Validate] to judge it by today's).
func FromCanonical(canonical []byte) (*countersignv1.Mandate, error) {
	m := &countersignv1.Mandate{}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(canonical, m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotCanonical, err)
	}
	again, err := Canonical(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotCanonical, err)
	}
	if !bytes.Equal(again, canonical) {
		return nil, fmt.Errorf("%w: the bytes differ from the canonical form of the mandate they encode", ErrNotCanonical)
	}
	return m, nil
}

// normalize orders the lists whose order carries no meaning and drops empty
// optional sections. advisory.gates keeps its order: gates run in it.
func normalize(m *countersignv1.Mandate) {
	slices.Sort(m.AllowedPayees)
	for _, g := range m.Grants {
		if g != nil {
			slices.Sort(g.Currencies)
		}
	}
	slices.SortStableFunc(m.Grants, func(a, b *countersignv1.Grant) int {
		return cmp.Or(cmp.Compare(a.GetActionKind(), b.GetActionKind()), compareBytes(a, b))
	})
	slices.SortStableFunc(m.Budgets, func(a, b *countersignv1.Money) int {
		return cmp.Or(strings.Compare(a.GetCurrency(), b.GetCurrency()), compareBytes(a, b))
	})
	slices.SortStableFunc(m.Windows, func(a, b *countersignv1.Window) int {
		return cmp.Or(cmp.Compare(a.GetScope(), b.GetScope()),
			cmp.Compare(a.GetDuration().AsDuration(), b.GetDuration().AsDuration()), compareBytes(a, b))
	})
	slices.SortStableFunc(m.Idempotency, func(a, b *countersignv1.IdempotencySetting) int {
		return cmp.Or(cmp.Compare(a.GetActionKind(), b.GetActionKind()), compareBytes(a, b))
	})
	if m.Provenance != nil && proto.Size(m.Provenance) == 0 {
		m.Provenance = nil
	}
	if m.Advisory != nil && proto.Size(m.Advisory) == 0 {
		m.Advisory = nil
	}
	// allow is the default: a mandate that says it is the one that does not.
	if m.FreeText == countersignv1.FreeText_FREE_TEXT_ALLOW {
		m.FreeText = countersignv1.FreeText_FREE_TEXT_UNSPECIFIED
	}
}

// compareBytes orders two messages by their deterministic wire form, the
// tie-break that makes the order of equal-keyed items irrelevant.
func compareBytes(a, b proto.Message) int {
	opts := proto.MarshalOptions{Deterministic: true}
	ab, _ := opts.Marshal(a)
	bb, _ := opts.Marshal(b)
	return bytes.Compare(ab, bb)
}
