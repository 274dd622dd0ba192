package engine

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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

// newRazorpayRig is newRig on a RazorpayX account (rzp_1) whose mandate
// grants INR payouts.
func newRazorpayRig(t *testing.T, shape ...func(*countersignv1.Mandate)) *rig {
	t.Helper()
	ctx := context.Background()
	mock, err := mockrail.New()
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(mock)
	t.Cleanup(func() { mock.Close(); ts.Close() })
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(mockrail.DefaultRazorpayKeyID+":"+mockrail.DefaultRazorpayKeySecret), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rails.New(rails.File{Rails: []rails.AccountConfig{{Account: "rzp_1", Rail: "razorpay",
		Hosts: []string{"api.razorpay.com"}, BaseURL: ts.URL, KeyFile: keyFile}}},
		rails.Adapters{sik.RailRazorpay: func() rail.Adapter { return razorpay.New() }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	url := pgtest.NewDatabase(t)
	store, err := ledger.Open(ctx, url, ledger.Options{MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	owner, err := store.CreateOwner(ctx, "owner")
	if err != nil {
		t.Fatal(err)
	}
	agent, err := store.CreateAgent(ctx, owner.ID, "agent")
	if err != nil {
		t.Fatal(err)
	}
	secret, hash, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.IssueCredential(ctx, agent.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash); err != nil {
		t.Fatal(err)
	}
	if _, err := store.GrantRailAccount(ctx, "rzp_1", owner.ID); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	m := &countersignv1.Mandate{
		Rail: countersignv1.Rail_RAIL_RAZORPAY, RailAccount: "rzp_1", AgentId: agent.ID, Purpose: "engine tests",
		ValidFrom: timestamppb.New(now.Add(-time.Hour)), ValidUntil: timestamppb.New(now.Add(24 * time.Hour)),
		Mode:   countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, MaxAmountMinor: 1 << 40, Currencies: []string{"INR"}}},
	}
	for _, f := range shape {
		f(m)
	}
	rec, err := mandate.Record(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateMandate(ctx, rec); err != nil {
		t.Fatal(err)
	}
	e := New(store, Options{Rails: rs, LeaseOwner: "engine-test", LeaseTTL: time.Minute}, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New())
	return &rig{e: e, store: store, secret: secret, mandateHash: rec.Hash, url: url, mock: mock, railURL: ts.URL}
}

// razorpayPayout is a RazorpayX payout of 10.00 INR with the JSON purpose
// and, when notes is not "", those notes.
func (r *rig) razorpayPayout(purpose, notes string) Request {
	body := `{"account_number":"7878780080316316","fund_account_id":"fa_00000000000001","amount":1000,"currency":"INR","mode":"IMPS","purpose":` + purpose
	if notes != "" {
		body += `,"notes":` + notes
	}
	return Request{Source: SourceExtAuthz, RequestID: "req", Credential: r.secret, Method: "POST", Host: "api.razorpay.com",
		Path: "/v1/payouts", Headers: map[string]string{"content-type": "application/json"}, Body: []byte(body + "}")}
}

// TestFreeTextPolicySeesARazorpayPurpose: a RazorpayX payout's purpose is
// keyed, and was any string of up to 100 characters, so under free_text:
// refuse a card number left in it while the same text in notes was
// refused (a review's finding). A purpose is now the name of one (refused
// otherwise, naming the member); one of Razorpay's defaults is no free
// text, and any other (a purpose made in the Dashboard, or a name the model
// composed) is, for free_text to refuse or hold.
func TestFreeTextPolicySeesARazorpayPurpose(t *testing.T) {
	ctx := context.Background()
	t.Run("refuse", func(t *testing.T) {
		r := newRazorpayRig(t, func(m *countersignv1.Mandate) { m.FreeText = countersignv1.FreeText_FREE_TEXT_REFUSE })
		expect(t, r.e.Decide(ctx, r.razorpayPayout(`"payout"`, `{"x":"4111111111111111 12/29 123"}`)), Block, "free_text_refused")
		card := r.e.Decide(ctx, r.razorpayPayout(`"4111111111111111 12/29 123"`, ""))
		expect(t, card, Block, ReasonBodyUnparseable)
		if !strings.Contains(card.Reason, "purpose") || card.Intent != nil {
			t.Fatalf("refusal %q (intent %+v) does not name purpose, or left an intent", card.Reason, card.Intent)
		}
		named := r.e.Decide(ctx, r.razorpayPayout(`"a4111111111111111 1229 123"`, ""))
		expect(t, named, Block, "free_text_refused")
		if !strings.Contains(named.Reason, "purpose") || named.Intent != nil {
			t.Fatalf("refusal %q (intent %+v) does not name purpose, or left an intent", named.Reason, named.Intent)
		}
		expect(t, r.e.Decide(ctx, r.razorpayPayout(`"vendor bill"`, "")), Allow, "allowed") // a default purpose is not free text
	})
	t.Run("hold", func(t *testing.T) {
		r := newRazorpayRig(t, func(m *countersignv1.Mandate) { m.FreeText = countersignv1.FreeText_FREE_TEXT_HOLD })
		expect(t, r.e.Decide(ctx, r.razorpayPayout(`"office rent"`, "")), Hold, "free_text_held")
		if rows := r.approvalRows(t); len(rows) != 1 || rows[0].labels != `{"purpose":"office rent"}` {
			t.Fatalf("approvals = %+v; want one showing the purpose", rows)
		}
		r.approveLive(t)
		expect(t, r.e.Decide(ctx, r.razorpayPayout(`"office rent"`, "")), Allow, "allowed")
	})
	t.Run("allow", func(t *testing.T) {
		r := newRazorpayRig(t)
		expect(t, r.e.Decide(ctx, r.razorpayPayout(`"office rent"`, "")), Allow, "allowed")
	})
}
