package engine

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/metrics"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// TestRazorpayMCPReads: on a Razorpay MCP account (preset razorpay, its
// default read-only tools) a read-only tools/call is refused where no
// ext_proc will see its answer (a payment carries its payer's UPI address,
// which only ext_proc removes), as a REST payment read is, and allowed
// where one will; fetch_all_payouts, which lists the payouts of any
// business account it names, is no default read-only tool (found by a
// review: the REST payout list is held to payout_account_numbers, the
// tool was not).
func TestRazorpayMCPReads(t *testing.T) {
	ctx := context.Background()
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(mockrail.DefaultRazorpayKeyID+":"+mockrail.DefaultRazorpayKeySecret), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rails.New(rails.File{Rails: []rails.AccountConfig{
		{Account: "rzp_rest", Rail: "razorpay", Hosts: []string{"api.razorpay.com"}, BaseURL: "http://127.0.0.1:1", KeyFile: keyFile,
			PayoutAccountNumbers: []string{"7878780080316316"}},
		{Account: "rzp_mcp", Rail: "razorpay", Hosts: []string{"mcp.razorpay.local"}, BaseURL: "http://127.0.0.1:1", KeyFile: keyFile,
			MCP: &rails.MCPConfig{Preset: "razorpay", BaseURL: "http://127.0.0.1:1"}},
	}}, rails.Adapters{sik.RailRazorpay: func() rail.Adapter { return razorpay.New() }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := ledger.Open(ctx, pgtest.NewDatabase(t), ledger.Options{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	owner, _ := store.CreateOwner(ctx, "owner")
	agent, _ := store.CreateAgent(ctx, owner.ID, "agent")
	secret, hash, _ := credential.Generate()
	if _, err := store.IssueCredential(ctx, agent.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"rzp_rest", "rzp_mcp"} {
		if _, err := store.GrantRailAccount(ctx, a, owner.ID); err != nil {
			t.Fatal(err)
		}
		now := time.Now().Truncate(time.Second)
		m := &countersignv1.Mandate{
			Rail: countersignv1.Rail_RAIL_RAZORPAY, RailAccount: a, AgentId: agent.ID, Purpose: "engine tests",
			ValidFrom: timestamppb.New(now.Add(-time.Hour)), ValidUntil: timestamppb.New(now.Add(24 * time.Hour)),
			Mode:   countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
			Grants: []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 10000, Currencies: []string{"INR"}}},
		}
		if err := mandate.Validate(m); err != nil {
			t.Fatal(err)
		}
		rec, err := mandate.Record(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.CreateMandate(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, extProc := range []bool{false, true} {
		e := New(store, Options{Rails: rs, LeaseOwner: "engine-test", LeaseTTL: time.Minute, ResolveTimeout: 500 * time.Millisecond, ExtProcInPath: extProc},
			slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New())
		for _, tc := range []struct {
			name, acct, method, host, path, body string
			src                                  Source
			want                                 string
		}{
			{"REST payment read, native", "rzp_rest", "GET", "api.razorpay.com", "/v1/payments/pay_1", "", SourceDecide, ReasonReadNeedsExtProc},
			{"REST payout list of an unlisted account", "rzp_rest", "GET", "api.razorpay.com", "/v1/payouts?account_number=1111222233334444", "", SourceExtAuthz, ReasonSourceAccountNotAllowed},
			{"MCP fetch_payment, native", "rzp_mcp", "POST", "mcp.razorpay.local", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_payment","arguments":{"payment_id":"pay_1"}}}`, SourceDecide, ReasonReadNeedsExtProc},
			{"MCP fetch_all_payments, native", "rzp_mcp", "POST", "mcp.razorpay.local", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_all_payments","arguments":{}}}`, SourceDecide, ReasonReadNeedsExtProc},
			{"MCP fetch_payment through Envoy", "rzp_mcp", "POST", "mcp.razorpay.local", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_payment","arguments":{"payment_id":"pay_1"}}}`, SourceExtAuthz, ReasonReadAllowed},
			{"MCP fetch_all_payouts of an unlisted account", "rzp_mcp", "POST", "mcp.razorpay.local", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_all_payouts","arguments":{"account_number":"1111222233334444"}}}`, SourceExtAuthz, ReasonActionUnknown},
		} {
			req := Request{Source: tc.src, RequestID: "req", Credential: secret, Method: tc.method, Host: tc.host, Path: tc.path, RailAccount: tc.acct,
				Headers: map[string]string{"content-type": "application/json", "accept": "application/json, text/event-stream"}}
			if tc.method == "GET" {
				req.Headers = nil
			}
			if tc.body != "" {
				req.Body = []byte(tc.body)
			}
			want := tc.want
			if extProc && want == ReasonReadNeedsExtProc && tc.src == SourceExtAuthz {
				want = ReasonReadAllowed
			}
			if !extProc && tc.src == SourceExtAuthz && want == ReasonReadAllowed {
				want = ReasonReadNeedsExtProc
			}
			out := e.Decide(ctx, req)
			if out.ReasonCode != want {
				t.Errorf("ext_proc in the path %v, %s: %s %s: %s; want %s", extProc, tc.name, out.Verdict, out.ReasonCode, out.Reason, want)
			}
			if want != ReasonReadAllowed && out.SetHeaders["authorization"] != "" {
				t.Errorf("ext_proc in the path %v, %s: refused, yet with the rail key set", extProc, tc.name)
			}
		}
	}
}
