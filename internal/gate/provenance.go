package gate

import (
	"net"
	"strings"
)

// CheckProvenance is G6: does the request go where, and speak what, the
// mandate pinned? The rail host and API version are compared with the
// mandate's pins; for a request through an MCP server, the called tool's
// current description hash (read by the engine from the server, never
// taken from the agent) must equal the pinned hash for that tool. Any
// drift blocks; so does an unpinned tool or an unknown description when
// the mandate pins any tool.
//
// An empty host pin pins nothing here: the engine only routes a request to
// a rail account from that account's configured hosts, which is the rail's
// default unless the operator chose otherwise.
func CheckProvenance(in Input) Result {
	if in.Mandate == nil {
		return block(GateProvenance, ReasonNotEvaluated, "There is no mandate (see %s), so there are no provenance pins to check against.", GateScope)
	}
	p := in.Mandate.GetProvenance()
	if pin := p.GetRailHost(); pin != "" && normHost(in.Host) != normHost(pin) {
		return block(GateProvenance, ReasonHostNotPinned, "The request goes to host %q, but %s pins the rail host %q.", in.Host, mandateName(in), pin)
	}
	if pin := p.GetApiVersion(); pin != "" && in.APIVersion != pin {
		return block(GateProvenance, ReasonAPIVersionMismatch, "The request carries API version %q, but %s pins %q; send API version %s.",
			in.APIVersion, mandateName(in), pin, pin)
	}
	// Tool pins apply to requests that reach the rail through an MCP
	// server, whatever the rail; they never come from the agent: the
	// engine reads the tool's current description from the server.
	pins := p.GetMcpToolDescriptionHashes()
	if (in.MCP || in.Rail == RailMCP || in.MCPTool != "") && len(pins) > 0 {
		want, ok := pins[in.MCPTool]
		switch {
		case in.MCPTool == "":
			return block(GateProvenance, ReasonMCPToolNotPinned, "This action names no MCP tool, but %s pins the MCP server's tool descriptions, so Countersign cannot check which tool moves the money; send the tools/call itself.", mandateName(in))
		case !ok:
			return block(GateProvenance, ReasonMCPToolNotPinned, "MCP tool %q is not among the tools %s pins, so it may not move money; no money moved. The owner can pin it in a new mandate.", in.MCPTool, mandateName(in))
		case in.MCPToolDescriptionHash == "":
			return block(GateProvenance, ReasonMCPToolDrift, "The current description of MCP tool %q is unknown, so it cannot be matched to the pinned hash %s; no money moved.", in.MCPTool, short(want))
		case in.MCPToolDescriptionHash != want:
			return block(GateProvenance, ReasonMCPToolDrift, "The MCP server now describes tool %q differently (description hash %s, not the %s pinned by %s): the tool changed after the mandate was made, so its instructions are not trusted and no money moved. The owner should review the new description and, if it is safe, pin it in a new mandate.",
				in.MCPTool, short(in.MCPToolDescriptionHash), short(want), mandateName(in))
		}
	}
	return pass(GateProvenance, "The request matches %s's provenance pins.", mandateName(in))
}

// normHost lower-cases a host and drops any port and trailing dot, so
// "API.stripe.com.:443" and "api.stripe.com" compare equal.
func normHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}
