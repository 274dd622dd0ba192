package gate

import (
	"strings"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

var (
	hashA = strings.Repeat("a1", 32)
	hashB = strings.Repeat("b2", 32)
)

func mcpIn() Input {
	in := payoutIn()
	in.Mandate.Rail, in.Rail, in.Host, in.APIVersion = countersignv1.Rail_RAIL_MCP, RailMCP, "mcp.stripe.com", ""
	in.Mandate.Provenance = &countersignv1.Provenance{RailHost: "mcp.stripe.com", McpToolDescriptionHashes: map[string]string{"create_payout": hashA}}
	in.MCPTool, in.MCPToolDescriptionHash = "create_payout", hashA
	return in
}

// mcpStripeIn is a refund through a payment MCP server in front of a
// Stripe account: the account, and so the mandate, is rail stripe.
func mcpStripeIn() Input {
	in := refundIn()
	in.MCP, in.Host, in.APIVersion = true, "mcp.stripe.com", ""
	in.Mandate.Provenance = &countersignv1.Provenance{McpToolDescriptionHashes: map[string]string{"create_refund": hashA}}
	in.MCPTool, in.MCPToolDescriptionHash = "create_refund", hashA
	return in
}

func TestCheckProvenance(t *testing.T) {
	runGate(t, refundIn, CheckProvenance, GateProvenance, []gateCase{
		{name: "pinned host and version", verdict: Allow, code: ReasonPassed},
		{name: "host with port and upper case", mod: func(in *Input) { in.Host = "API.Stripe.com.:443" }, verdict: Allow, code: ReasonPassed},
		{name: "no pins", mod: func(in *Input) { in.Mandate.Provenance = nil; in.Host, in.APIVersion = "elsewhere.example", "" }, verdict: Allow, code: ReasonPassed},
		{name: "host drift", mod: func(in *Input) { in.Host = "api.stripe.com.evil.example" }, verdict: Block, code: ReasonHostNotPinned, contains: []string{"api.stripe.com.evil.example", `"api.stripe.com"`}},
		{name: "version drift", mod: func(in *Input) { in.APIVersion = "2025-01-27.acacia" }, verdict: Block, code: ReasonAPIVersionMismatch, contains: []string{"2025-01-27.acacia", "2024-06-20"}},
		{name: "version missing", mod: func(in *Input) { in.APIVersion = "" }, verdict: Block, code: ReasonAPIVersionMismatch, contains: []string{`""`}},
		{name: "no mandate", mod: func(in *Input) { in.Mandate = nil }, verdict: Block, code: ReasonNotEvaluated, contains: []string{GateScope}},
		{name: "mcp tool pinned", mod: func(in *Input) { *in = mcpIn() }, verdict: Allow, code: ReasonPassed},
		{name: "mcp tool description changed", mod: func(in *Input) { *in = mcpIn(); in.MCPToolDescriptionHash = hashB }, verdict: Block, code: ReasonMCPToolDrift,
			contains: []string{"create_payout", hashB[:12], hashA[:12]}},
		{name: "mcp tool description unknown", mod: func(in *Input) { *in = mcpIn(); in.MCPToolDescriptionHash = "" }, verdict: Block, code: ReasonMCPToolDrift, contains: []string{"unknown"}},
		{name: "mcp tool not pinned", mod: func(in *Input) { *in = mcpIn(); in.MCPTool = "create_transfer" }, verdict: Block, code: ReasonMCPToolNotPinned, contains: []string{"create_transfer"}},
		{name: "mcp without tool pins", mod: func(in *Input) {
			*in = mcpIn()
			in.Mandate.Provenance.McpToolDescriptionHashes = nil
			in.MCPToolDescriptionHash = hashB
		}, verdict: Allow, code: ReasonPassed},
		{name: "mcp host drift", mod: func(in *Input) { *in = mcpIn(); in.Host = "mcp.example" }, verdict: Block, code: ReasonHostNotPinned},

		// A Stripe account behind an MCP server: rail stripe, pins apply.
		{name: "stripe mcp pinned and matching", mod: func(in *Input) { *in = mcpStripeIn() }, verdict: Allow, code: ReasonPassed},
		{name: "stripe mcp drift", mod: func(in *Input) { *in = mcpStripeIn(); in.MCPToolDescriptionHash = hashB }, verdict: Block, code: ReasonMCPToolDrift,
			contains: []string{"create_refund", hashB[:12], hashA[:12], "no money moved", "new mandate"}},
		{name: "stripe mcp description not read", mod: func(in *Input) { *in = mcpStripeIn(); in.MCPToolDescriptionHash = "" }, verdict: Block, code: ReasonMCPToolDrift, contains: []string{"unknown"}},
		{name: "stripe mcp unpinned tool", mod: func(in *Input) { *in = mcpStripeIn(); in.MCPTool = "create_payout" }, verdict: Block, code: ReasonMCPToolNotPinned, contains: []string{"create_payout"}},
		{name: "stripe mcp action naming no tool", mod: func(in *Input) { *in = mcpStripeIn(); in.MCPTool, in.MCPToolDescriptionHash = "", "" }, verdict: Block, code: ReasonMCPToolNotPinned,
			contains: []string{"names no MCP tool", "tools/call"}},
		{name: "pins do not apply off mcp", mod: func(in *Input) {
			in.Mandate.Provenance.McpToolDescriptionHashes = map[string]string{"create_refund": hashA}
		}, verdict: Allow, code: ReasonPassed},
		{name: "entry and list pins do not apply off mcp", mod: func(in *Input) {
			in.Mandate.Provenance.McpToolEntryHashes, in.Mandate.Provenance.McpToolsListHash = map[string]string{"create_refund": hashA}, hashA
		}, verdict: Allow, code: ReasonPassed},

		// Entry and list pins: each set pin must match; drift names the pin.
		{name: "all three pins matching", mod: func(in *Input) { *in = mcpAllPinsIn() }, verdict: Allow, code: ReasonPassed},
		{name: "entry pin alone matching", mod: func(in *Input) {
			*in = mcpAllPinsIn()
			in.Mandate.Provenance.McpToolDescriptionHashes, in.Mandate.Provenance.McpToolsListHash = nil, ""
			in.MCPToolDescriptionHash, in.MCPToolsListHash = "", ""
		}, verdict: Allow, code: ReasonPassed},
		{name: "entry drift under a matching description", mod: func(in *Input) { *in = mcpAllPinsIn(); in.MCPToolEntryHash = hashA }, verdict: Block, code: ReasonMCPToolEntryDrift,
			contains: []string{"create_refund", "entry hash " + hashA[:12], hashB[:12], "parameters", "no money moved", "new mandate"}},
		{name: "entry unknown or not canonical", mod: func(in *Input) { *in = mcpAllPinsIn(); in.MCPToolEntryHash = "" }, verdict: Block, code: ReasonMCPToolEntryDrift,
			contains: []string{"unknown", "RFC 8785"}},
		{name: "list drift under matching tool pins", mod: func(in *Input) { *in = mcpAllPinsIn(); in.MCPToolsListHash = hashA }, verdict: Block, code: ReasonMCPToolsListDrift,
			contains: []string{"list hash " + hashA[:12], hashC[:12], "no money moved", "new mandate"}},
		{name: "list unknown or not canonical", mod: func(in *Input) { *in = mcpAllPinsIn(); in.MCPToolsListHash = "" }, verdict: Block, code: ReasonMCPToolsListDrift,
			contains: []string{"unknown", "RFC 8785"}},
		{name: "description drift is named first", mod: func(in *Input) {
			*in = mcpAllPinsIn()
			in.MCPToolDescriptionHash, in.MCPToolEntryHash, in.MCPToolsListHash = hashB, hashA, hashA
		}, verdict: Block, code: ReasonMCPToolDrift},
		{name: "list pin alone does not pin a tool", mod: func(in *Input) {
			*in = mcpAllPinsIn()
			in.Mandate.Provenance.McpToolDescriptionHashes, in.Mandate.Provenance.McpToolEntryHashes = nil, nil
		}, verdict: Block, code: ReasonMCPToolNotPinned, contains: []string{"create_refund", "entry"}},
		{name: "entry pin on another tool leaves this one unpinned", mod: func(in *Input) {
			*in = mcpAllPinsIn()
			in.Mandate.Provenance.McpToolDescriptionHashes = nil
			in.Mandate.Provenance.McpToolEntryHashes = map[string]string{"create_payout": hashB}
		}, verdict: Block, code: ReasonMCPToolNotPinned},
		{name: "list pin with a description pin only", mod: func(in *Input) {
			*in = mcpAllPinsIn()
			in.Mandate.Provenance.McpToolEntryHashes = nil
			in.MCPToolEntryHash = ""
			in.MCPToolsListHash = hashB
		}, verdict: Block, code: ReasonMCPToolsListDrift},
	})
}

var hashC = strings.Repeat("c3", 32)

// mcpAllPinsIn is mcpStripeIn under a mandate that pins the tool's
// description (hashA) and entry (hashB) and the whole list (hashC), all
// matching.
func mcpAllPinsIn() Input {
	in := mcpStripeIn()
	p := in.Mandate.Provenance
	p.McpToolEntryHashes, p.McpToolsListHash = map[string]string{"create_refund": hashB}, hashC
	in.MCPToolEntryHash, in.MCPToolsListHash = hashB, hashC
	return in
}

func TestNormHost(t *testing.T) {
	for in, want := range map[string]string{
		"api.stripe.com":        "api.stripe.com",
		"API.Stripe.COM":        "api.stripe.com",
		"api.stripe.com:443":    "api.stripe.com",
		"api.stripe.com.":       "api.stripe.com",
		"[::1]:8443":            "::1",
		"localhost:12111":       "localhost",
		"api.razorpay.com.:443": "api.razorpay.com",
		"":                      "",
	} {
		if got := normHost(in); got != want {
			t.Errorf("normHost(%q) = %q, want %q", in, got, want)
		}
	}
}
