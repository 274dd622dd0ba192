package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/mcp"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/telemetry"
)

// Reason codes of G6's tool read.
const (
	ReasonMCPToolsUnreadable = "mcp_tools_unreadable"
	ReasonMCPToolNotListed   = "mcp_tool_not_listed"
)

const spanDescribeTool = "rail.describe_tool"

// describeTool reads, from the MCP server itself and with the key
// Countersign holds, the hashes of the tool a tools/call names and of the
// server's whole tools list (one tools/list read, every page), when the
// mandate m sets MCP pins and pins that tool by its description or its
// entry (G6 compares them). The agent's own account of the tool (a native
// ProvenanceClaim, whatever its tools/list showed it) is never used: a
// hostile agent would assert the pinned hash. A failed read refuses the
// request (fail closed, F1); out is set then. No pins, no tool, an
// unpinned tool or no MCP account: nothing is read (G6 refuses the
// unpinned tool itself). The read is agentID's to pay for, as the
// referent's is (railreads.go).
func (e *Engine) describeTool(ctx context.Context, req Request, agentID string, acct *rails.Account, tool string, m *countersignv1.Mandate) (hashes rail.ToolHashes, out *Outcome) {
	d, isMCP := acct.Adapter.(rail.ToolDescriber)
	if !isMCP || tool == "" || !toolPinned(m.GetProvenance(), tool) {
		return rail.ToolHashes{}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, e.opts.ResolveTimeout)
	defer cancel()
	rctx, span := e.tracer.Start(rctx, spanDescribeTool, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrRailAccount.String(acct.ID)))
	reads := e.meter(acct.ToolClient, agentID, acct)
	hashes, err := d.DescribeTool(rctx, reads.client(), tool)
	telemetry.End(span, err)
	wait, limited := reads.limited()
	switch {
	case limited:
		o := e.railReadsRefused(acct, req, agentID, wait)
		return rail.ToolHashes{}, &o
	case err == nil:
		return hashes, nil
	case errors.Is(err, mcp.ErrToolNotListed):
		o := refuseRail(acct, req, ReasonMCPToolNotListed, fmt.Sprintf("The MCP server no longer lists tool %q, so it cannot be checked against the mandate's pins; no money moved. The owner should review the server's tools.", tool), http.StatusForbidden)
		return rail.ToolHashes{}, &o
	}
	e.log.Warn("mcp tool description not read", "request_id", req.RequestID, "rail_account", acct.ID, "tool", tool, "err", err)
	o := refuseRail(acct, req, ReasonMCPToolsUnreadable, fmt.Sprintf("Countersign could not read the current description of MCP tool %q from the MCP server (%v), so it cannot check it against the mandate's pins; no money moved, retry later.", tool, err), http.StatusServiceUnavailable)
	return rail.ToolHashes{}, &o
}

// toolPinned reports whether p pins tool by its description or its whole
// entry: only then does G6 compare what the server lists (any MCP pin
// refuses a tool pinned by neither, with no read).
func toolPinned(p *countersignv1.Provenance, tool string) bool {
	_, byDesc := p.GetMcpToolDescriptionHashes()[tool]
	_, byEntry := p.GetMcpToolEntryHashes()[tool]
	return byDesc || byEntry
}
