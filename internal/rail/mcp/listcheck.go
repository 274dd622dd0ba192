package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/countersign/countersign/internal/rail"
)

// Pins are a mandate's MCP tool pins (countersign.v1.Provenance): the
// description hash (DescriptionHash) and the entry hash (EntryHash) of
// each tool pinned by them, and the whole list's hash (ListHash).
type Pins struct {
	Descriptions map[string]string
	Entries      map[string]string
	List         string
}

// Empty reports whether p pins nothing: the agent's tools/list is then
// not checked.
func (p Pins) Empty() bool {
	return len(p.Descriptions) == 0 && len(p.Entries) == 0 && p.List == ""
}

// ErrListDrifted is the error of a tools/list answer that does not match
// the pins; ErrListUnreadable of one that cannot be read as a tools/list
// answer (both refuse the answer: fail closed).
var (
	ErrListDrifted    = errors.New("mcp: the tools list does not match the mandate's pins")
	ErrListUnreadable = errors.New("mcp: the tools list answer cannot be read")
)

// ToolsListRequest returns the id of the agent's tools/list request in
// body (a POSTed JSON-RPC request Parse accepted as a read), and false
// for any other message.
func ToolsListRequest(body []byte) (json.RawMessage, bool) {
	id := RequestID(body)
	if id == nil {
		return nil, false
	}
	var m struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &m) != nil || m.Method != "tools/list" {
		return nil, false
	}
	return id, true
}

// CheckListed judges the answer the agent is about to receive to its
// tools/list request requestID against the mandate's pins, so that an
// MCP server cannot show Countersign's own tools/list read (G6) one list
// and the agent another. An HTTP error status (not 2xx) carries no list:
// nil. Otherwise the answer must be one JSON-RPC response to requestID
// (plain JSON or an SSE message event, read as Classify reads answers,
// no key twice) with a tools array; each listed tool pinned by its
// description must have that description hash, each pinned by its entry
// that entry hash (RFC 8785, as EntryHash); a list pin is judged on a
// whole list only, so a page naming a nextCursor fails under it, as does
// a list whose ListHash differs. A tool the pins do not name is allowed
// unless a list pin is set. A JSON-RPC error answer carries no list: nil.
// The error wraps ErrListDrifted or ErrListUnreadable and names the tool
// and pin, never the server's text.
func CheckListed(resp rail.Response, requestID json.RawMessage, pins Pins) error {
	if resp.Status < http.StatusOK || resp.Status >= http.StatusMultipleChoices {
		return nil
	}
	msg, err := listAnswer(resp)
	if err != nil {
		return err
	}
	if callID(msg["id"]) != callID(requestID) {
		return fmt.Errorf("%w: the answer is not to the agent's request", ErrListUnreadable)
	}
	if _, isError := msg["error"]; isError {
		return nil
	}
	tools, next, err := readPage(msg, requestID)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrListUnreadable, err)
	}
	entries := make([]listEntry, 0, len(tools))
	for _, t := range tools {
		e, cerr := canonicalEntry(t.raw)
		if want, ok := pins.Descriptions[t.name]; ok && DescriptionHash(t.description) != want {
			return fmt.Errorf("%w: tool %q: its description is not the pinned one (mcp_tool_description_hashes)", ErrListDrifted, t.name)
		}
		if want, ok := pins.Entries[t.name]; ok && (cerr != nil || hashHex(e.canonical) != want) {
			return fmt.Errorf("%w: tool %q: its entry is not the pinned one (mcp_tool_entry_hashes)", ErrListDrifted, t.name)
		}
		if pins.List != "" && cerr != nil {
			// Not named: an unpinned name is the server's text.
			return fmt.Errorf("%w: a listed tool has no RFC 8785 canonical form, so the list cannot match the pinned one (mcp_tools_list_hash)", ErrListDrifted)
		}
		entries = append(entries, e)
	}
	if pins.List == "" {
		return nil
	}
	if next != "" {
		return fmt.Errorf("%w: the server answered one page of a longer list, which mcp_tools_list_hash cannot judge", ErrListDrifted)
	}
	if listHash(entries) != pins.List {
		// The tools are not named: which one changed the hash cannot
		// tell, and an unpinned name is the server's text.
		return fmt.Errorf("%w: the %d listed tools are not the pinned list (mcp_tools_list_hash)", ErrListDrifted, len(tools))
	}
	return nil
}

// listAnswer is the one JSON-RPC response of a tools/list answer, each
// JSON message in it free of a key named twice (a client might read the
// other one).
func listAnswer(resp rail.Response) (object, error) {
	// Countersign asked for the answer unencoded; one that is encoded all
	// the same is bytes it does not read as the client will (a gzip whose
	// header comment is a clean event and whose payload a poisoned one:
	// found by a review).
	if coding, encoded := encodedAnswer(resp.Headers); encoded {
		return nil, fmt.Errorf("%w: the answer is encoded (%s)", ErrListUnreadable, coding)
	}
	body := bytes.TrimSpace(resp.Body)
	if len(body) == 0 {
		return nil, fmt.Errorf("%w: the answer has no body", ErrListUnreadable)
	}
	if len(body) > MaxToolsListBytes {
		return nil, fmt.Errorf("%w: the answer is larger than %d bytes", ErrListUnreadable, MaxToolsListBytes)
	}
	messages := [][]byte{body}
	if isEventStream(resp.Headers, body) {
		events, err := sseMessages(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrListUnreadable, err)
		}
		messages = events
	}
	for _, m := range messages {
		if err := checkJSON(m); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrListUnreadable, err)
		}
	}
	msg, err := responseMessage(resp)
	if err != nil {
		return nil, fmt.Errorf("%w: answered %w", ErrListUnreadable, err)
	}
	return msg, nil
}

// ReasonToolsListDrifted is the reason code of the error the agent
// receives in place of a tools/list answer that CheckListed refused.
const ReasonToolsListDrifted = "mcp_tools_list_drifted"

// ListRefusal is the JSON-RPC error the agent receives, to its own
// request id, in place of a tools/list answer CheckListed refused (err):
// a server error (RefusalCode) naming the drifted tool and pin, never the
// server's text.
func ListRefusal(requestID json.RawMessage, err error) []byte {
	msg := "The MCP server's tools list could not be checked against the owner's mandate (its answer could not be read as a tools list); Countersign withheld it."
	if errors.Is(err, ErrListDrifted) {
		// The error names only pinned tools (owner's names) and pins.
		why := strings.TrimPrefix(err.Error(), ErrListDrifted.Error()+": ")
		msg = "The MCP server's tools list does not match the owner's mandate (" + why + "); Countersign withheld it. The owner should review the server's tools."
	}
	return RefusalFor(requestID, ReasonToolsListDrifted, msg)
}
