package extauthz

import (
	"encoding/json"
	"maps"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/rail/mcp"
)

// TestToolsListCheckTravelsInTheMetadata: an ALLOW carrying a tools/list
// check writes it beside (never inside) the attempt's metadata, and
// ext_proc reads back exactly it; metadata that names a check it cannot
// read is reported so (ext_proc withholds the answer).
func TestToolsListCheckTravelsInTheMetadata(t *testing.T) {
	c := &engine.ToolsListCheck{RequestID: json.RawMessage(`"a-1"`), Pins: mcp.Pins{
		Descriptions: map[string]string{"create_refund": "d"}, Entries: map[string]string{"create_refund": "e"}, List: "l"}}
	resp := ToCheckResponse(engine.Outcome{Verdict: engine.Allow, ToolsList: c})
	got, present, ok := ToolsListFromMetadata(resp.GetDynamicMetadata())
	if !present || !ok || string(got.RequestID) != `"a-1"` || got.Pins.List != "l" ||
		!maps.Equal(got.Pins.Descriptions, c.Pins.Descriptions) || !maps.Equal(got.Pins.Entries, c.Pins.Entries) {
		t.Fatalf("read back %+v present=%v ok=%v", got, present, ok)
	}
	if _, isIntent := IntentFromMetadata(resp.GetDynamicMetadata()); isIntent {
		t.Fatal("a read's check reads as an attempt")
	}
	if _, present, _ := ToolsListFromMetadata(ToCheckResponse(engine.Outcome{Verdict: engine.Allow}).GetDynamicMetadata()); present {
		t.Fatal("an ALLOW without a check carries one")
	}
	for name, v := range map[string]*structpb.Value{
		"not a struct": structpb.NewStringValue("x"),
		"bad id":       structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"request_id": structpb.NewStringValue("{}"), "list_hash": structpb.NewStringValue("l")}}),
		"no pins":      structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"request_id": structpb.NewStringValue("1")}}),
		"bad map": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"request_id": structpb.NewStringValue("1"),
			"entry_hashes": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"t": structpb.NewNumberValue(1)}})}}),
	} {
		md := &structpb.Struct{Fields: map[string]*structpb.Value{toolsListKey: v}}
		if _, present, ok := ToolsListFromMetadata(md); !present || ok {
			t.Errorf("%s: present=%v ok=%v, want present and unreadable", name, present, ok)
		}
	}
}
