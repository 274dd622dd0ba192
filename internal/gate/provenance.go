package gate

import (
	"net"
	"strings"
)

// CheckProvenance is G6: does the request go where, and speak what, the
// mandate pinned? The rail host and API version are compared with the
// mandate's pins; for a request through an MCP server, the called tool's
// current description and entry hashes and the whole list's hash (read by
// the engine from the server, never taken from the agent) must equal the
// pins the mandate sets (provenance_mcp.go). Any drift blocks; so does an
// unpinned tool or an unknown hash when the mandate sets any MCP pin.
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
		return block(GateProvenance, ReasonHostNotPinned, "The request goes to host %q, but %s pins the rail host %q.", inert(in.Host), mandateName(in), pin)
	}
	if pin := p.GetApiVersion(); pin != "" && in.APIVersion != pin {
		return block(GateProvenance, ReasonAPIVersionMismatch, "The request carries API version %q, but %s pins %q; send API version %s.",
			inert(in.APIVersion), mandateName(in), pin, pin)
	}
	// Tool pins apply to requests that reach the rail through an MCP
	// server, whatever the rail; they never come from the agent: the
	// engine reads the server's current list itself.
	if (in.MCP || in.Rail == RailMCP || in.MCPTool != "") && hasToolPins(p) {
		if r, drift := checkToolPins(in, p); drift {
			return r
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
