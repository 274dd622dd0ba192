package rail

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/countersign/countersign/internal/sik"
)

// CanonicalLabels is the canonical JSON (RFC 8785) of labels' values by
// member name: order-free, "{}" for none. It is what an approval records,
// so the same labels in any order are the same request.
func CanonicalLabels(labels map[string]Label) string {
	if len(labels) == 0 {
		return "{}"
	}
	m := make(map[string]string, len(labels))
	for k, l := range labels {
		m[k] = l.Value
	}
	raw, err := json.Marshal(m)
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	canon, err := sik.Canonicalize(raw)
	if err != nil {
		panic(err) // json.Marshal's output is valid JSON
	}
	return string(canon)
}

// LabelsDigest is the lower-case hex SHA-256 of canonical labels.
func LabelsDigest(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return hex.EncodeToString(sum[:])
}

// FreeTextMembers names, in order, the labels that carry free text.
func FreeTextMembers(labels map[string]Label) []string {
	var out []string
	for k, l := range labels {
		if l.FreeText {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// AddLabel records name=value in *labels, allocating the map. A label is
// shown to the owner (an approval binds it), so a name or value holding a
// character that is not seen (sik.Hidden) is refused: the error says which
// and where, for the parser to refuse the request with.
func AddLabel(labels *map[string]Label, name, value string, freeText bool) error {
	if err := sik.CheckShown(name); err != nil {
		return fmt.Errorf("the name %q %w", name, err)
	}
	if err := sik.CheckShown(value); err != nil {
		return err
	}
	if *labels == nil {
		*labels = map[string]Label{}
	}
	(*labels)[name] = Label{Value: value, FreeText: freeText}
	return nil
}
