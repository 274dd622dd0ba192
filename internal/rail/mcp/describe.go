package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/countersign/countersign/internal/rail"
)

// DescriptionHash is the one definition of an MCP tool-description pin
// (countersign.v1.Provenance.mcp_tool_description_hashes, gate G6): the
// lower-case hex SHA-256 of the UTF-8 bytes of the tool's "description"
// exactly as the server lists it in tools/list (no trimming, no
// normalisation; a tool listed without a description hashes the empty
// string). `countersign` users compute it with `printf %s "$desc" |
// sha256sum`.
func DescriptionHash(description string) string {
	sum := sha256.Sum256([]byte(description))
	return hex.EncodeToString(sum[:])
}

// Bounds of Countersign's own tools/list read: a page's body, and how
// many pages (cursors) it follows before giving up. The canonical forms
// of the entries kept for the list pin are bounded too (RFC 8785 can
// spell a short number longer: 1e20 is 100000000000000000000); past the
// bound the list has no pin hash (a list pin then refuses).
const (
	MaxToolsListBytes          = 1 << 20
	MaxToolsListPages          = 16
	MaxToolsListCanonicalBytes = MaxToolsListPages * MaxToolsListBytes
)

// ErrToolNotListed is the error of a tools/list that does not list the tool.
var ErrToolNotListed = errors.New("mcp: tool not listed by the server")

// DescribeTool implements rail.ToolDescriber with a read-only tools/list
// to the MCP server, over c (the server's URL and the key Countersign
// holds), following nextCursor to the end. From that one read it returns
// the tool's description hash, its entry hash and the whole list's hash
// (DescriptionHash, EntryHash, ListHash), so the three pins are judged
// against the same list.
//
// MCP specification 2025-06-18, server/tools: "To discover available
// tools, clients send a tools/list request. This operation supports
// pagination"; each listed Tool has a name and an optional description.
// Servers that declare tools.listChanged send
// notifications/tools/list_changed "when the list of available tools
// changes", but only to a client holding a session, which Countersign
// does not (it sees each call through Envoy, not the agent's session).
// So it keeps no cache: every pinned tools/call is checked against a
// list read at decision time, the way G2 reads the referent. A server
// that insists on an initialize handshake before tools/list answers an
// error here, and the call is refused (fail closed).
//
// Strict: the answer must be HTTP 200 with one JSON-RPC 2.0 response to
// this request's id (plain JSON or an SSE message), no key twice, within
// MaxToolsListBytes per page and MaxToolsListPages pages; a tool listed
// twice is an error (which description would the agent have read?). The
// entry and list hashes are of the bytes the server sent for each entry;
// an entry without an RFC 8785 form leaves them "" (see rail.ToolHashes).
func (ad *adapter) DescribeTool(ctx context.Context, c rail.Client, tool string) (rail.ToolHashes, error) {
	if c == nil {
		return rail.ToolHashes{}, errors.New("mcp: no client for the MCP server is configured")
	}
	var (
		found     *listedTool
		entries   []listEntry
		entry     string
		canonical int
		listOK    = true
	)
	cursor := ""
	for page := range MaxToolsListPages {
		tools, next, err := ad.listPage(ctx, c, page, cursor)
		if err != nil {
			return rail.ToolHashes{}, err
		}
		for _, t := range tools {
			e, cerr := canonicalEntry(t.raw)
			if cerr == nil && listOK {
				canonical += len(e.canonical)
				entries = append(entries, e)
			}
			listOK = listOK && cerr == nil && canonical <= MaxToolsListCanonicalBytes
			if t.name != tool {
				continue
			}
			if found != nil {
				return rail.ToolHashes{}, fmt.Errorf("mcp: tools/list lists tool %q twice", tool)
			}
			found = &t
			if cerr == nil {
				entry = hashHex(e.canonical)
			}
		}
		if next == "" {
			if found == nil {
				return rail.ToolHashes{}, fmt.Errorf("%w: %q", ErrToolNotListed, tool)
			}
			h := rail.ToolHashes{Description: DescriptionHash(found.description), Entry: entry}
			if listOK {
				h.List = listHash(entries)
			}
			return h, nil
		}
		cursor = next
	}
	return rail.ToolHashes{}, fmt.Errorf("mcp: tools/list has more than %d pages", MaxToolsListPages)
}

// listedTool is one tools/list entry: its name, its description, and the
// bytes the server sent for the whole entry.
type listedTool struct {
	name, description string
	raw               json.RawMessage
}

// listPage reads one page of tools/list.
func (ad *adapter) listPage(ctx context.Context, c rail.Client, page int, cursor string) ([]listedTool, string, error) {
	id := "countersign-tools-list-" + strconv.Itoa(page)
	req := map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/list"}
	if cursor != "" {
		req["params"] = map[string]string{"cursor": cursor}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, "", err
	}
	resp, err := c.Do(ctx, http.MethodPost, ad.endpoint, map[string]string{
		"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
	}, body)
	if err != nil {
		// The sentence reaches the agent: say what failed, not the
		// server's internal URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, "", fmt.Errorf("mcp: tools/list: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxToolsListBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("mcp: tools/list: reading the answer: %w", err)
	}
	if len(raw) > MaxToolsListBytes {
		return nil, "", fmt.Errorf("mcp: tools/list: the answer is larger than %d bytes", MaxToolsListBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("mcp: tools/list: the server answered HTTP %d", resp.StatusCode)
	}
	headers := map[string]string{"content-type": resp.Header.Get("Content-Type")}
	if len(raw) > 0 && !isEventStream(headers, raw) {
		if err := checkJSON(raw); err != nil {
			return nil, "", fmt.Errorf("mcp: tools/list: %w", err)
		}
	}
	msg, err := responseMessage(rail.Response{Status: resp.StatusCode, Headers: headers, Body: raw})
	if err != nil {
		return nil, "", fmt.Errorf("mcp: tools/list: answered %w", err)
	}
	return readPage(msg, json.RawMessage(strconv.Quote(id)))
}

// readPage reads the tools and next cursor of a tools/list response to
// the request whose id is id.
func readPage(msg object, id json.RawMessage) ([]listedTool, string, error) {
	if callID(msg["id"]) != callID(id) {
		return nil, "", fmt.Errorf("mcp: tools/list: the response is not to request %s", callID(id))
	}
	if e, ok := msg["error"]; ok {
		return nil, "", fmt.Errorf("mcp: tools/list: the server answered an error: %s", snippet(e))
	}
	// No key twice anywhere in the result (within an SSE event too): a
	// tool with two descriptions is two answers to "what did the agent read".
	if err := checkJSON(msg["result"]); err != nil {
		return nil, "", fmt.Errorf("mcp: tools/list: %w", err)
	}
	result, ok := asObject(msg["result"])
	if !ok {
		return nil, "", errors.New("mcp: tools/list: the result is not an object")
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(result["tools"], &tools); err != nil || tools == nil {
		return nil, "", errors.New("mcp: tools/list: the result has no tools array")
	}
	next := ""
	if raw, ok := result["nextCursor"]; ok && string(raw) != "null" {
		if next, ok = asString(raw); !ok || next == "" {
			return nil, "", errors.New("mcp: tools/list: nextCursor is not a non-empty string")
		}
	}
	out := make([]listedTool, 0, len(tools))
	for i, raw := range tools {
		t, ok := asObject(raw)
		if !ok {
			return nil, "", fmt.Errorf("mcp: tools/list: tools[%d] is not an object", i)
		}
		name, ok := asString(t["name"])
		if !ok || name == "" {
			return nil, "", fmt.Errorf("mcp: tools/list: tools[%d] has no name", i)
		}
		lt := listedTool{name: name, raw: raw}
		if d, present := t["description"]; present && string(d) != "null" {
			if lt.description, ok = asString(d); !ok {
				return nil, "", fmt.Errorf("mcp: tools/list: tool %q has a description that is not a string", name)
			}
		}
		out = append(out, lt)
	}
	return out, next, nil
}
