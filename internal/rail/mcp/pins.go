package mcp

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/countersign/countersign/internal/sik"
)

// EntryHash is the one definition of an MCP tool-entry pin
// (countersign.v1.Provenance.mcp_tool_entry_hashes, gate G6): the
// lower-case hex SHA-256 of the RFC 8785 (JCS) canonical JSON of the
// tool's whole entry object exactly as the server lists it in tools/list,
// every member included (name, title, description, inputSchema,
// outputSchema, annotations, _meta and any the specification does not
// name yet). Key order, whitespace, string escapes and number spelling (1.0
// or 1, 1e2 or 100) do not change it; any member's content does. An entry
// that is not a JSON object, names a key twice, or holds a number beyond
// IEEE 754 double range has no canonical form: an error.
func EntryHash(entry []byte) (string, error) {
	e, err := canonicalEntry(entry)
	if err != nil {
		return "", err
	}
	return hashHex(e.canonical), nil
}

// ListHash is the one definition of an MCP tools-list pin
// (countersign.v1.Provenance.mcp_tools_list_hash): the lower-case hex
// SHA-256 of the RFC 8785 canonical JSON of one array holding every entry
// the server lists (all pages), each whole as in [EntryHash], sorted by
// tool name in byte order of the UTF-8 name (ties, which a well-formed
// server never lists, by the entries' canonical bytes). An entry without a
// name or without a canonical form is an error.
func ListHash(entries []json.RawMessage) (string, error) {
	list := make([]listEntry, 0, len(entries))
	for i, raw := range entries {
		e, err := canonicalEntry(raw)
		if err != nil {
			return "", fmt.Errorf("tools[%d]: %w", i, err)
		}
		list = append(list, e)
	}
	return listHash(list), nil
}

// ErrNoCanonicalForm is the error of a tool entry RFC 8785 cannot
// canonicalise.
var ErrNoCanonicalForm = errors.New("mcp: tool entry has no RFC 8785 canonical form")

// listEntry is one listed tool: its name and the canonical bytes of its
// whole entry.
type listEntry struct {
	name      string
	canonical []byte
}

// canonicalEntry canonicalises one tools/list entry, which must be an
// object with a non-empty string name.
func canonicalEntry(raw []byte) (listEntry, error) {
	t, ok := asObject(raw)
	if !ok {
		return listEntry{}, errors.New("mcp: tool entry is not an object")
	}
	name, ok := asString(t["name"])
	if !ok || name == "" {
		return listEntry{}, errors.New("mcp: tool entry has no name")
	}
	if err := numbersRoundTrip(raw); err != nil {
		return listEntry{}, fmt.Errorf("%w: tool %q: %w", ErrNoCanonicalForm, name, err)
	}
	c, err := sik.Canonicalize(raw)
	if err != nil {
		return listEntry{}, fmt.Errorf("%w: tool %q: %w", ErrNoCanonicalForm, name, err)
	}
	return listEntry{name: name, canonical: c}, nil
}

// listHash hashes the canonical array of entries (it sorts them). An array
// of canonical members, joined by commas without whitespace, is itself the
// canonical form of the array (RFC 8785 §3.2.1 keeps array order).
func listHash(entries []listEntry) string {
	slices.SortFunc(entries, func(a, b listEntry) int {
		return cmp.Or(strings.Compare(a.name, b.name), bytes.Compare(a.canonical, b.canonical))
	})
	h := sha256.New()
	h.Write([]byte{'['})
	for i, e := range entries {
		if i > 0 {
			h.Write([]byte{','})
		}
		h.Write(e.canonical)
	}
	h.Write([]byte{']'})
	return hex.EncodeToString(h.Sum(nil))
}

func hashHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// numbersRoundTrip refuses a number whose value RFC 8785 would change: the
// canonical form writes each number as the IEEE 754 double nearest to it,
// so 9007199254740993 and 9007199254740992, or 1e-400 and 0, would hash
// alike, and a server could change digits the agent reads (a maximum in a
// schema) under an unmoved pin (found by a review). A number is kept only
// when its text and its double's shortest form are the same value (0.1,
// 1.0 and 1e2 are; 2^53+1 is not).
func numbersRoundTrip(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		n, ok := tok.(json.Number)
		if !ok {
			continue
		}
		// A double's shortest form has at most 17 significant digits and an
		// exponent within ±324: longer text (or a larger exponent, which
		// big.Rat would expand) is not a double's value.
		if len(n) > maxNumberText || exponentBeyond(string(n), 400) {
			return fmt.Errorf("number %s is not the value of any IEEE 754 double", clipNumber(n))
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			return fmt.Errorf("number %s is beyond IEEE 754 double range", clipNumber(n))
		}
		text, ok1 := new(big.Rat).SetString(string(n))
		near, ok2 := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
		if !ok1 || !ok2 || text.Cmp(near) != 0 {
			return fmt.Errorf("number %s is not the value of any IEEE 754 double (its canonical form would be %s)", clipNumber(n), strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
}

// maxNumberText bounds a number's text in a tool entry.
const maxNumberText = 64

// exponentBeyond reports whether the number text n has an exponent part
// larger in magnitude than limit.
func exponentBeyond(n string, limit int) bool {
	i := strings.IndexAny(n, "eE")
	if i < 0 {
		return false
	}
	e, err := strconv.Atoi(strings.TrimPrefix(n[i+1:], "+"))
	return err != nil || e > limit || e < -limit
}

// clipNumber is n cut for an error message.
func clipNumber(n json.Number) string {
	if len(n) > 40 {
		return string(n[:40]) + "…"
	}
	return string(n)
}
