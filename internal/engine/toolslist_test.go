package engine

import (
	"context"
	"maps"
	"strings"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/rail/mcp"
)

// TestToolsListReadCarriesThePins: an agent's tools/list allowed under a
// mandate that sets any MCP pin carries the pins and the agent's request
// id (ext_proc checks the answer against them); without pins, or for any
// other read, it carries nothing. Countersign reads no tools/list of its
// own for it.
func TestToolsListReadCarriesThePins(t *testing.T) {
	entry, err := mcp.EntryHash([]byte(pinnedRefundEntry))
	if err != nil {
		t.Fatal(err)
	}
	desc := map[string]string{"create_refund": mcp.DescriptionHash(honestRefundDesc)}
	all := &countersignv1.Provenance{McpToolDescriptionHashes: desc, McpToolEntryHashes: map[string]string{"create_refund": entry}, McpToolsListHash: "ab" + entry[2:]}
	cases := []struct {
		name string
		prov *countersignv1.Provenance
		body string
		want bool
		own  bool   // an own-answer check, not a list check
		id   string // the id the check names ("" for none)
	}{
		{name: "tools/list under all pins", prov: all, body: `{"jsonrpc":"2.0","id":"a-1","method":"tools/list"}`, want: true, id: `"a-1"`},
		{name: "tools/list under a list pin alone", prov: &countersignv1.Provenance{McpToolsListHash: all.GetMcpToolsListHash()},
			body: `{"jsonrpc":"2.0","id":"a-1","method":"tools/list","params":{"cursor":"c"}}`, want: true, id: `"a-1"`},
		{name: "tools/list without pins", body: `{"jsonrpc":"2.0","id":"a-1","method":"tools/list"}`},
		{name: "resources/list without pins", body: `{"jsonrpc":"2.0","id":"a-1","method":"resources/list"}`},
		// Under pins every other message's answer may carry no response but
		// its own (a ping's stream could carry the pending tools/list's).
		{name: "another read under pins", prov: all, body: `{"jsonrpc":"2.0","id":"a-1","method":"resources/list"}`, want: true, own: true, id: `"a-1"`},
		{name: "a ping under pins", prov: all, body: `{"jsonrpc":"2.0","id":9,"method":"ping"}`, want: true, own: true, id: `9`},
		{name: "a notification under pins", prov: all, body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`, want: true, own: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newMCPRigPinned(t, tc.prov, "metadata")
			r.e.opts.ExtProcInPath = true // Countersign's own route, ext_proc in the path
			req := r.call(1, "create_refund", 1)
			req.Body, req.RailAccount = []byte(tc.body), "acct_mcp"
			out := r.e.Decide(context.Background(), req)
			if out.Verdict != Allow || out.ReasonCode != ReasonReadAllowed {
				t.Fatalf("decide = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
			}
			if ae, set := out.SetHeaders["accept-encoding"]; set != tc.want || set && ae != "identity" {
				t.Fatalf("accept-encoding %q set=%v: a checked answer must come uncompressed, others as asked", ae, set)
			}
			if !tc.want {
				if out.ToolsList != nil {
					t.Fatalf("the read carries a tools/list check: %+v", out.ToolsList)
				}
				return
			}
			c := out.ToolsList
			if c == nil || c.OwnAnswer != tc.own || string(c.RequestID) != tc.id || c.Pins.List != tc.prov.GetMcpToolsListHash() ||
				!maps.Equal(c.Pins.Descriptions, tc.prov.GetMcpToolDescriptionHashes()) || !maps.Equal(c.Pins.Entries, tc.prov.GetMcpToolEntryHashes()) {
				t.Fatalf("check = %+v, want the mandate's pins under id %s (own answer %v)", c, tc.id, tc.own)
			}
			r.tools.mu.Lock()
			defer r.tools.mu.Unlock()
			if r.tools.lists != 0 {
				t.Fatalf("Countersign read tools/list %d times for the agent's read", r.tools.lists)
			}
		})
	}
}

// TestMCPStreamIsRefusedUnderPins: under a mandate with MCP pins, the
// agent's GET of the MCP server's event stream is refused with 405 (a
// client then opens no GET stream; the server's messages come on the
// POST streams): ext_proc does not check that stream, and a client takes
// a response to its id from any stream, so a server could answer the
// checked tools/list there first with a poisoned list (found by a
// review). Without pins the stream is a read, as before.
func TestMCPStreamIsRefusedUnderPins(t *testing.T) {
	entry, err := mcp.EntryHash([]byte(pinnedRefundEntry))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		prov *countersignv1.Provenance
		want string
	}{
		{"entry pin", &countersignv1.Provenance{McpToolEntryHashes: map[string]string{"create_refund": entry}}, ReasonMCPStreamUnderPins},
		{"description pin", &countersignv1.Provenance{McpToolDescriptionHashes: map[string]string{"create_refund": mcp.DescriptionHash(honestRefundDesc)}}, ReasonMCPStreamUnderPins},
		{"list pin alone", &countersignv1.Provenance{McpToolsListHash: entry}, ReasonMCPStreamUnderPins},
		{"no pins", nil, ReasonReadAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newMCPRigPinned(t, tc.prov, "metadata")
			req := r.call(1, "create_refund", 1)
			req.Method, req.Body = "GET", nil
			req.Headers["accept"] = "text/event-stream"
			delete(req.Headers, "content-type")
			out := r.e.Decide(context.Background(), req)
			if out.ReasonCode != tc.want {
				t.Fatalf("GET of the stream = %s %s: %s; want %s", out.Verdict, out.ReasonCode, out.Reason, tc.want)
			}
			if tc.want == ReasonMCPStreamUnderPins && (out.Verdict != Block || out.HTTPStatus != 405 || out.ResponseHeaders["allow"] != "POST") {
				t.Fatalf("refusal = %s %d %v; want BLOCK 405 with Allow: POST", out.Verdict, out.HTTPStatus, out.ResponseHeaders)
			}
		})
	}
}

// TestMCPPinsNeedTheAnswerCheck: under MCP pins the agent may only see
// answers ext_proc judged, so an MCP message whose answer no ext_proc will
// see — a native caller's, one routed by a proxy without Countersign's
// routes (no rail_account: Istio's CUSTOM provider), or with ext_proc out
// of the path — is refused; with ext_proc in the path it is allowed with
// its check, and without pins as before (found by a review).
func TestMCPPinsNeedTheAnswerCheck(t *testing.T) {
	entry, err := mcp.EntryHash([]byte(pinnedRefundEntry))
	if err != nil {
		t.Fatal(err)
	}
	pinned := &countersignv1.Provenance{McpToolEntryHashes: map[string]string{"create_refund": entry}}
	for _, tc := range []struct {
		name        string
		prov        *countersignv1.Provenance
		extProc     bool
		railAccount string
		want        string
	}{
		{"pins, ext_proc in the path", pinned, true, "acct_mcp", ReasonReadAllowed},
		{"pins, ext_proc out of the path", pinned, false, "acct_mcp", ReasonMCPPinsNeedExtProc},
		{"pins, routed without Countersign's route", pinned, true, "", ReasonMCPPinsNeedExtProc},
		{"no pins, ext_proc out of the path", nil, false, "", ReasonReadAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newMCPRigPinned(t, tc.prov, "metadata")
			r.e.opts.ExtProcInPath = tc.extProc
			for _, body := range []string{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":2,"method":"ping"}`} {
				req := r.call(1, "create_refund", 1)
				req.Body, req.RailAccount = []byte(body), tc.railAccount
				if out := r.e.Decide(context.Background(), req); out.ReasonCode != tc.want {
					t.Fatalf("%s: %s %s: %s; want %s", body, out.Verdict, out.ReasonCode, out.Reason, tc.want)
				}
			}
		})
	}
}

// TestMCPMoneyCallPinsNeedTheAnswerCheck: a money call's answer stream is
// no safer than a ping's (a hostile server could put a response to the
// agent's pending tools/list, a poisoned list, into it), so under MCP
// pins a tools/call that moves money is refused as any other MCP message
// is when no ext_proc will check its answer — a native caller's, one with
// ext_proc out of the path, one routed without Countersign's route (no
// rail_account) — with the read's refusal, before any read at the rail or
// of the tools list, and nothing written but the decision: the same call
// with its answer checked then starts the intent's first attempt. With
// ext_proc in the path it goes on to the gates; without pins nothing
// changes.
func TestMCPMoneyCallPinsNeedTheAnswerCheck(t *testing.T) {
	entry, err := mcp.EntryHash([]byte(pinnedRefundEntry))
	if err != nil {
		t.Fatal(err)
	}
	descPin := &countersignv1.Provenance{McpToolDescriptionHashes: map[string]string{"create_refund": mcp.DescriptionHash(honestRefundDesc)}}
	entryPin := &countersignv1.Provenance{McpToolEntryHashes: map[string]string{"create_refund": entry}}
	type path struct {
		name        string
		source      Source
		extProc     bool
		railAccount string
	}
	checked := path{"ext_proc in the path", SourceExtAuthz, true, "acct_mcp"}
	uncheckedPaths := []path{
		{"native caller", SourceDecide, true, "acct_mcp"},
		{"ext_proc out of the path", SourceExtAuthz, false, "acct_mcp"},
		{"routed without Countersign's route", SourceExtAuthz, true, ""},
	}
	via := func(r *mcpRig, p path, req Request) Request {
		r.e.opts.ExtProcInPath = p.extProc
		req.Source, req.RailAccount = p.source, p.railAccount
		return req
	}
	for _, pins := range []struct {
		name string
		prov *countersignv1.Provenance
	}{{"description pin", descPin}, {"entry pin", entryPin}, {"no pins", nil}} {
		for _, p := range append([]path{checked}, uncheckedPaths...) {
			t.Run(pins.name+", "+p.name, func(t *testing.T) {
				r := newMCPRigPinned(t, pins.prov, "metadata")
				r.tools.setTools("[" + pinnedRefundEntry + "]")
				ctx := context.Background()
				out := r.e.Decide(ctx, via(r, p, r.call(1, "create_refund", 2500)))
				if pins.prov == nil || p == checked {
					if out.Verdict != Allow || out.ReasonCode != ReasonAllowed {
						t.Fatalf("money call = %s %s: %s; want ALLOW %s", out.Verdict, out.ReasonCode, out.Reason, ReasonAllowed)
					}
					return
				}
				if out.Verdict != Block || out.ReasonCode != ReasonMCPPinsNeedExtProc || !strings.Contains(out.Reason, "no ext_proc in the path") {
					t.Fatalf("money call = %s %s: %s; want BLOCK %s", out.Verdict, out.ReasonCode, out.Reason, ReasonMCPPinsNeedExtProc)
				}
				if _, leaks := out.SetHeaders["authorization"]; leaks || out.Intent != nil || len(out.Gates) != 0 || out.DecisionID == 0 {
					t.Fatalf("refusal headers %v intent %+v gates %+v decision %d; want a recorded refusal that names no intent and runs no gate",
						out.SetHeaders, out.Intent, out.Gates, out.DecisionID)
				}
				if !strings.Contains(string(out.Body), `"id":1`) || !strings.Contains(string(out.Body), ReasonMCPPinsNeedExtProc) {
					t.Fatalf("refusal body %s: want a JSON-RPC error for call 1", out.Body)
				}
				// The read's refusal on the same path, in the same shape.
				ping := r.call(2, "create_refund", 1)
				ping.Body = []byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
				if read := r.e.Decide(ctx, via(r, p, ping)); read.ReasonCode != out.ReasonCode || read.HTTPStatus != out.HTTPStatus || read.Verdict != out.Verdict {
					t.Fatalf("ping = %s %s %d; the money call's refusal = %s %s %d", read.Verdict, read.ReasonCode, read.HTTPStatus, out.Verdict, out.ReasonCode, out.HTTPStatus)
				}
				if n, lists := railReads(r.mock), r.toolLists(); n != 0 || lists != 0 {
					t.Fatalf("%d rail reads and %d tools/list reads before the refusal; want none", n, lists)
				}
				// Nothing of the refused call was kept: through ext_proc it
				// is a new intent's first attempt.
				again := r.e.Decide(ctx, via(r, checked, r.call(3, "create_refund", 2500)))
				if again.Verdict != Allow || !strings.HasPrefix(again.Reason, "attempt 1 of intent") {
					t.Fatalf("the call with its answer checked = %s %s: %s; want ALLOW, attempt 1", again.Verdict, again.ReasonCode, again.Reason)
				}
			})
		}
	}
}
