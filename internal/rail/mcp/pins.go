package mcp

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
