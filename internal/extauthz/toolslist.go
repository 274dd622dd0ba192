package extauthz

import (
	"encoding/json"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/rail/mcp"
)

// toolsListKey is the member of ext_authz's dynamic metadata that carries
// an allowed MCP tools/list read's check (engine.ToolsListCheck); beside
// "countersign" (IntentMetadata), never inside it: a read has no attempt.
const toolsListKey = "countersign_mcp_tools_list"

// ToolsListMetadata writes c into md (the dynamic metadata of an ALLOW),
// which it returns, made if nil.
func ToolsListMetadata(md *structpb.Struct, c *engine.ToolsListCheck) *structpb.Struct {
	if md == nil {
		md = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	md.Fields[toolsListKey] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"request_id":         structpb.NewStringValue(string(c.RequestID)),
		"description_hashes": structpb.NewStructValue(stringMap(c.Pins.Descriptions)),
		"entry_hashes":       structpb.NewStructValue(stringMap(c.Pins.Entries)),
		"list_hash":          structpb.NewStringValue(c.Pins.List),
		"own_answer":         structpb.NewBoolValue(c.OwnAnswer),
	}})
	return md
}

func stringMap(m map[string]string) *structpb.Struct {
	s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(m))}
	for k, v := range m {
		s.Fields[k] = structpb.NewStringValue(v)
	}
	return s
}

// ToolsListFromMetadata reads ToolsListMetadata back (ext_proc receives it
// under MetadataNamespace). present says md holds the member; ok that it
// was read: present and not ok is metadata that cannot be read, whose
// answer the agent must not receive unchecked (fail closed).
func ToolsListFromMetadata(md *structpb.Struct) (c engine.ToolsListCheck, present, ok bool) {
	v, present := md.GetFields()[toolsListKey]
	if !present {
		return engine.ToolsListCheck{}, false, false
	}
	s := v.GetStructValue()
	if s == nil {
		return engine.ToolsListCheck{}, true, false
	}
	f := s.GetFields()
	id := json.RawMessage(f["request_id"].GetStringValue())
	own := f["own_answer"].GetBoolValue()
	switch {
	case own && len(id) == 0:
		id = nil // a notification's answer: no response may be in it
	case mcp.RequestID([]byte(`{"id":`+string(id)+`}`)) == nil:
		return engine.ToolsListCheck{}, true, false
	}
	pins := mcp.Pins{List: f["list_hash"].GetStringValue()}
	var good bool
	if pins.Descriptions, good = readStringMap(f["description_hashes"]); !good {
		return engine.ToolsListCheck{}, true, false
	}
	if pins.Entries, good = readStringMap(f["entry_hashes"]); !good {
		return engine.ToolsListCheck{}, true, false
	}
	if pins.Empty() {
		return engine.ToolsListCheck{}, true, false
	}
	return engine.ToolsListCheck{RequestID: id, Pins: pins, OwnAnswer: own}, true, true
}

// readStringMap reads a struct of strings; an absent member is no map.
func readStringMap(v *structpb.Value) (map[string]string, bool) {
	if v == nil {
		return nil, true
	}
	s := v.GetStructValue()
	if s == nil {
		return nil, false
	}
	out := make(map[string]string, len(s.GetFields()))
	for k, e := range s.GetFields() {
		sv, isString := e.GetKind().(*structpb.Value_StringValue)
		if !isString {
			return nil, false
		}
		out[k] = sv.StringValue
	}
	return out, true
}
