package gate

import countersignv1 "github.com/countersign/countersign/gen/countersign/v1"

// hasToolPins reports whether p sets any of G6's MCP pins: a tool's
// description hash, a tool's entry hash, or the whole list's hash.
func hasToolPins(p *countersignv1.Provenance) bool {
	return len(p.GetMcpToolDescriptionHashes()) > 0 || len(p.GetMcpToolEntryHashes()) > 0 || p.GetMcpToolsListHash() != ""
}

// checkToolPins is G6 for a request through an MCP server under a mandate
// that sets MCP pins: the tool must be pinned by its description or its
// whole entry (the pins name the tools that may move money), and every pin
// set must match the list Countersign read from the server for this
// decision. A hash that was not read ("") never matches. It answers a
// BLOCK and true on the first pin that fails, in the order description,
// entry, list, so the reason names the pin that drifted.
func checkToolPins(in Input, p *countersignv1.Provenance) (Result, bool) {
	desc, descPinned := p.GetMcpToolDescriptionHashes()[in.MCPTool]
	entry, entryPinned := p.GetMcpToolEntryHashes()[in.MCPTool]
	switch {
	case in.MCPTool == "":
		return block(GateProvenance, ReasonMCPToolNotPinned, "This action names no MCP tool, but %s pins the MCP server's tools, so Countersign cannot check which tool moves the money; send the tools/call itself.", mandateName(in)), true
	case !descPinned && !entryPinned:
		return block(GateProvenance, ReasonMCPToolNotPinned, "MCP tool %q is not among the tools %s pins (by description or by whole entry), so it may not move money; no money moved. The owner can pin it in a new mandate.", inert(in.MCPTool), mandateName(in)), true
	case descPinned && in.MCPToolDescriptionHash == "":
		return block(GateProvenance, ReasonMCPToolDrift, "The current description of MCP tool %q is unknown, so it cannot be matched to the pinned hash %s; no money moved.", inert(in.MCPTool), short(desc)), true
	case descPinned && in.MCPToolDescriptionHash != desc:
		return block(GateProvenance, ReasonMCPToolDrift, "The MCP server now describes tool %q differently (description hash %s, not the %s pinned by %s): the tool changed after the mandate was made, so its instructions are not trusted and no money moved. The owner should review the new description and, if it is safe, pin it in a new mandate.",
			inert(in.MCPTool), short(in.MCPToolDescriptionHash), short(desc), mandateName(in)), true
	case entryPinned && in.MCPToolEntryHash == "":
		return block(GateProvenance, ReasonMCPToolEntryDrift, "The current entry of MCP tool %q in the server's tools list is unknown or has no RFC 8785 canonical form, so it cannot be matched to the pinned entry hash %s; no money moved.", inert(in.MCPTool), short(entry)), true
	case entryPinned && in.MCPToolEntryHash != entry:
		return block(GateProvenance, ReasonMCPToolEntryDrift, "The MCP server now lists tool %q differently (entry hash %s, not the %s pinned by %s): its parameters, title, annotations, schemas or metadata changed after the mandate was made, so they are not trusted and no money moved. The owner should review the tool's new entry and, if it is safe, pin it in a new mandate.",
			inert(in.MCPTool), short(in.MCPToolEntryHash), short(entry), mandateName(in)), true
	}
	if want := p.GetMcpToolsListHash(); want != "" {
		if in.MCPToolsListHash == "" {
			return block(GateProvenance, ReasonMCPToolsListDrift, "The MCP server's current tools list is unknown or has no RFC 8785 canonical form, so it cannot be matched to the pinned list hash %s; no money moved.", short(want)), true
		}
		if in.MCPToolsListHash != want {
			return block(GateProvenance, ReasonMCPToolsListDrift, "The MCP server's tools list changed (list hash %s, not the %s pinned by %s): a tool was added, removed or changed after the mandate was made, so the server's instructions are not trusted and no money moved. The owner should review the server's tools and, if they are safe, pin the list in a new mandate.",
				short(in.MCPToolsListHash), short(want), mandateName(in)), true
		}
	}
	return Result{}, false
}
