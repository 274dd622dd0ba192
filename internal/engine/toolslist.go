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
	// OwnAnswer: the read is not a tools/list; its answer must carry no
	// response but to RequestID (nil: a notification's or a client
	// response's answer, which carries none), or the server could slip a
	// response to the agent's pending tools/list into it (mcp.CheckOwnAnswer).
	OwnAnswer bool
}

// ReasonMCPStreamUnderPins is the reason code of a refused GET of an MCP
// server's event stream under a mandate with MCP pins.
const ReasonMCPStreamUnderPins = "mcp_stream_under_pins"

// mcpPins is the MCP pins m sets on an MCP account (ok false: none, or
// not an MCP account).
func mcpPins(acct *rails.Account, m *countersignv1.Mandate) (mcp.Pins, bool) {
	if m == nil {
		return mcp.Pins{}, false
	}
	if _, isMCP := acct.Adapter.(rail.ToolDescriber); !isMCP {
		return mcp.Pins{}, false
	}
	p := m.GetProvenance()
	pins := mcp.Pins{Descriptions: p.GetMcpToolDescriptionHashes(), Entries: p.GetMcpToolEntryHashes(), List: p.GetMcpToolsListHash()}
	return pins, !pins.Empty()
}

// streamUnderPins refuses a GET of an MCP server's event stream when the
// mandate sets MCP pins: ext_proc does not process that route, and a
// client matches responses by id whatever stream carries them, so a
// server could answer the agent's checked tools/list first on the GET
// stream with a poisoned list (or move the answer there by a resumable
// POST stream, resumed by a GET with Last-Event-ID) (found by a review).
// 405 is what a client reads as "this server offers no GET stream" (the
// TypeScript SDK's StreamableHTTPClientTransport); the server's messages
// still reach it on the POST streams.
func streamUnderPins(req Request, acct *rails.Account, m *countersignv1.Mandate) *Outcome {
	if req.Method != http.MethodGet {
		return nil
	}
	if _, pinned := mcpPins(acct, m); !pinned {
		return nil
	}
	// Countersign's own refusal, not the MCP adapter's (a JSON-RPC error
	// in a 200, which a client would read as a stream that ended): the
	// status is the message.
	out := refuse(req, ReasonMCPStreamUnderPins, "The owner's mandate pins this MCP server's tools, and answers on its GET event stream are not checked against the pins, so the stream is not opened; the server's messages arrive on the POST streams.", http.StatusMethodNotAllowed)
	out.ResponseHeaders = map[string]string{"allow": "POST"}
	return &out
}

// ReasonMCPPinsNeedExtProc is the reason code of an MCP message refused
// under MCP pins where no ext_proc will check its answer.
const ReasonMCPPinsNeedExtProc = "mcp_pins_need_ext_proc"

// answersChecked reports whether ext_proc will see the answer to req: it
// came through Envoy by one of Countersign's own routes (they name the
// rail account and run ext_proc: the contract test and chartcheck hold
// them to both) with ext_proc in the path (attemptStart's ViaEnvoy, the
// same test).
func answersChecked(req Request, o Options) bool {
	return req.Source == SourceExtAuthz && o.ExtProcInPath && req.RailAccount != ""
}

// unchecked refuses an MCP message under MCP pins whose answer no ext_proc
// will check (a native caller's, or one through a proxy without ext_proc:
// Istio's CUSTOM provider): the pins promise that the agent sees only
// answers judged against them, which nothing else enforces (found by a
// review). A read's (Engine.read) and a money call's alike (Engine.early):
// a money call's answer stream could carry a response to the agent's
// pending tools/list, a poisoned list, as well as a ping's.
func unchecked(req Request, o Options, acct *rails.Account, m *countersignv1.Mandate) *Outcome {
	if _, pinned := mcpPins(acct, m); !pinned || answersChecked(req, o) {
		return nil
	}
	out := refuseRail(acct, req, ReasonMCPPinsNeedExtProc, "The owner's mandate pins this MCP server's tools, and the answers to this request would reach the agent without Countersign's check of them (no ext_proc in the path), so it is not sent.", http.StatusForbidden)
	return &out
}

// toolsListCheck is the check an allowed read carries: set for a POSTed
// tools/list on an MCP account under a mandate that sets any MCP pin,
// nil otherwise (no pins: the answer goes untouched, at no cost).
func toolsListCheck(req Request, acct *rails.Account, m *countersignv1.Mandate) *ToolsListCheck {
	if req.Method != http.MethodPost {
		return nil
	}
	pins, pinned := mcpPins(acct, m)
	if !pinned {
		return nil
	}
	id, ok := mcp.ToolsListRequest(req.Body)
	if !ok {
		// Any other message under pins: its answer may carry no response
		// but its own (found by a review: a ping's stream carried a
		// poisoned answer to the pending tools/list).
		return &ToolsListCheck{RequestID: mcp.AnswerID(req.Body), Pins: pins, OwnAnswer: true}
	}
	return &ToolsListCheck{RequestID: id, Pins: pins}
}
