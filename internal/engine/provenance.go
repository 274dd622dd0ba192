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
// Countersign holds, the current description hash of the tool a tools/call
// names, when the mandate m pins tool descriptions (G6 compares them). The
// agent's own account of the tool (a native ProvenanceClaim, whatever its
// tools/list showed it) is never used: a hostile agent would assert the
// pinned hash. A failed read refuses the request (fail closed, F1); out is
// set then. No pins, no tool or no MCP account: nothing is read. The read
// is agentID's to pay for, as the referent's is (railreads.go).
func (e *Engine) describeTool(ctx context.Context, req Request, agentID string, acct *rails.Account, tool string, m *countersignv1.Mandate) (hash string, out *Outcome) {
	d, isMCP := acct.Adapter.(rail.ToolDescriber)
	if !isMCP || tool == "" || len(m.GetProvenance().GetMcpToolDescriptionHashes()) == 0 {
		return "", nil
	}
	if _, pinned := m.GetProvenance().GetMcpToolDescriptionHashes()[tool]; !pinned {
		return "", nil // G6 refuses an unpinned tool; no read needed
	}
	rctx, cancel := context.WithTimeout(ctx, e.opts.ResolveTimeout)
	defer cancel()
	rctx, span := e.tracer.Start(rctx, spanDescribeTool, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrRailAccount.String(acct.ID)))
	reads := e.meter(acct.ToolClient, agentID, acct)
	hash, err := d.DescribeTool(rctx, reads.client(), tool)
	telemetry.End(span, err)
	wait, limited := reads.limited()
	switch {
	case limited:
		o := e.railReadsRefused(acct, req, agentID, wait)
		return "", &o
	case err == nil:
		return hash, nil
	case errors.Is(err, mcp.ErrToolNotListed):
		o := refuseRail(acct, req, ReasonMCPToolNotListed, fmt.Sprintf("The MCP server no longer lists tool %q, so its description cannot be checked against the mandate's pin; no money moved. The owner should review the server's tools.", tool), http.StatusForbidden)
		return "", &o
	}
	e.log.Warn("mcp tool description not read", "request_id", req.RequestID, "rail_account", acct.ID, "tool", tool, "err", err)
	o := refuseRail(acct, req, ReasonMCPToolsUnreadable, fmt.Sprintf("Countersign could not read the current description of MCP tool %q from the MCP server (%v), so it cannot check it against the mandate's pin; no money moved, retry later.", tool, err), http.StatusServiceUnavailable)
	return "", &o
}
