package engine

import (
	"encoding/json"
	"net/http"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/mcp"
	"github.com/countersign/countersign/internal/rails"
)

// ToolsListCheck is what the answer to an agent's MCP tools/list must
// match before the agent receives it: the mandate's MCP pins, and the id
// of the agent's request (the answer, or the error that replaces it,
// names it). ext_proc checks the answer (mcp.CheckListed) when an allowed
// read carries one, so that a server cannot show Countersign's own
// tools/list read (G6, describeTool) the pinned list and the agent a
// poisoned one.
type ToolsListCheck struct {
	RequestID json.RawMessage
	Pins      mcp.Pins
}

// toolsListCheck is the check an allowed read carries: set for a POSTed
// tools/list on an MCP account under a mandate that sets any MCP pin,
// nil otherwise (no pins: the answer goes untouched, at no cost).
func toolsListCheck(req Request, acct *rails.Account, m *countersignv1.Mandate) *ToolsListCheck {
	if m == nil || req.Method != http.MethodPost {
		return nil
	}
	if _, isMCP := acct.Adapter.(rail.ToolDescriber); !isMCP {
		return nil
	}
	p := m.GetProvenance()
	pins := mcp.Pins{Descriptions: p.GetMcpToolDescriptionHashes(), Entries: p.GetMcpToolEntryHashes(), List: p.GetMcpToolsListHash()}
	if pins.Empty() {
		return nil
	}
	id, ok := mcp.ToolsListRequest(req.Body)
	if !ok {
		return nil
	}
	return &ToolsListCheck{RequestID: id, Pins: pins}
}
