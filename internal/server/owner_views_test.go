package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// restUsage is GetMandateUsageResponse as grpc-gateway writes it.
type restUsage struct {
	Usage struct {
		MandateHash string `json:"mandateHash"`
		AsOf        string `json:"asOf"`
		Budgets     []struct {
			Currency   string `json:"currency"`
			LimitMinor string `json:"limitMinor"`
			SpentMinor string `json:"spentMinor"`
			HeldMinor  string `json:"heldMinor"`
			FreeMinor  string `json:"freeMinor"`
		} `json:"budgets"`
		Windows []struct {
			WindowIndex int    `json:"windowIndex"`
			Scope       string `json:"scope"`
			Key         string `json:"key"`
			Duration    string `json:"duration"`
			MaxCalls    int    `json:"maxCalls"`
			Calls       string `json:"calls"`
			Amount      *struct {
				AmountMinor string `json:"amountMinor"`
				Currency    string `json:"currency"`
			} `json:"amount"`
			WindowStartTime string `json:"windowStartTime"`
			NextReleaseTime string `json:"nextReleaseTime"`
		} `json:"windows"`
		FeeBudget *struct {
			SpentMinor string `json:"spentMinor"`
			FreeMinor  string `json:"freeMinor"`
		} `json:"feeBudget"`
	} `json:"usage"`
}

func (h *allowHarness) usage(t *testing.T, hash, query string) restUsage {
	t.Helper()
	s, body := h.rest(t, "GET", "/v1/mandates/"+hash+"/usage"+query, "Bearer "+h.ownerToken, nil)
	var u restUsage
	if s != 200 || json.Unmarshal([]byte(body), &u) != nil {
		t.Fatalf("GET usage = %d %s", s, body)
	}
	return u
}

// windowLine is one window's figures, for comparing with what a test wants.
func (u restUsage) windows() map[string]string {
	out := map[string]string{}
	for _, w := range u.Usage.Windows {
		v := w.Calls
		if w.Amount != nil {
			v += " " + w.Amount.AmountMinor + " " + w.Amount.Currency
		}
		out[w.Scope+" "+w.Key] = v
	}
	return out
}

// TestMandateUsageIsWhatTheGateCounts: the usage an owner reads is the
// count the limits gate decides on. Each figure is checked, then pushed to
// its limit by real decisions: the gate admits exactly what the usage says
// is free, and refuses one more.
func TestMandateUsageIsWhatTheGateCounts(t *testing.T) {
	h := bareRailHarness(t)
	m := mandateFor(h)
	m.Budgets = []*countersignv1.Money{{AmountMinor: 10000, Currency: "USD"}}
	m.Windows = []*countersignv1.Window{
		{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT, Duration: durationpb.New(time.Hour), MaxCalls: 4,
			MaxAmount: &countersignv1.Money{AmountMinor: 6000, Currency: "USD"}},
		{Scope: countersignv1.WindowScope_WINDOW_SCOPE_PAYEE, Duration: durationpb.New(time.Hour), MaxCalls: 2},
	}
	m.FeeBudget = &countersignv1.Money{AmountMinor: 500, Currency: "USD"}
	hash := applyMandateTo(t, h, m)
	payout := func(payee string, amount int64) *countersignv1.DecideResponse {
		return h.decide(t, &countersignv1.ProposedAction{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT,
			Subject: payee, Payee: payee, AmountMinor: &amount, Currency: "USD"})
	}

	before := time.Now()
	allowed := h.allow(t, 1000)
	h.allow(t, 1500)
	if r := payout("ba_one", 2000); r.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("payout: %s %s", r.GetVerdict(), r.GetReasonCode())
	}
	u := h.usage(t, hash, "")
	if u.Usage.MandateHash != hash || len(u.Usage.Budgets) != 1 {
		t.Fatalf("usage = %+v", u)
	}
	b := u.Usage.Budgets[0]
	if b.Currency != "USD" || b.LimitMinor != "10000" || b.HeldMinor != "4500" || b.SpentMinor != "0" || b.FreeMinor != "5500" {
		t.Errorf("budget = %+v, want 4500 held of 10000, 5500 free", b)
	}
	want := map[string]string{"WINDOW_SCOPE_AGENT " + h.agentID: "3 4500 USD", "WINDOW_SCOPE_PAYEE ba_one": "1", "WINDOW_SCOPE_PAYEE pi_bench": "2"}
	if got := u.windows(); !equalMaps(got, want) {
		t.Errorf("windows = %v, want %v", got, want)
	}
	asOf, _ := time.Parse(time.RFC3339Nano, u.Usage.AsOf)
	// Every use is still in flight: none leaves before its answer, so no
	// window has a release time yet.
	for _, w := range u.Usage.Windows {
		start, _ := time.Parse(time.RFC3339Nano, w.WindowStartTime)
		if w.Duration != "3600s" || !start.Equal(asOf.Add(-time.Hour)) || w.NextReleaseTime != "" {
			t.Errorf("window %s %s: duration %s, start %s, next release %s (as of %s)", w.Scope, w.Key, w.Duration, w.WindowStartTime, w.NextReleaseTime, u.Usage.AsOf)
		}
	}
	if f := u.Usage.FeeBudget; f == nil || f.SpentMinor != "0" || f.FreeMinor != "500" {
		t.Errorf("fee budget = %+v", f)
	}

	// The payee window of pi_bench is full (2 of 2): the gate refuses.
	if r := h.decide(t, refund("pi_bench", 1, "")); r.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || r.GetReasonCode() != "window_calls_exceeded" {
		t.Errorf("third refund on pi_bench: %s %s", r.GetVerdict(), r.GetReasonCode())
	}
	// The agent window has 6000 - 4500 = 1500 free: one minor unit more is
	// refused, exactly the free amount is allowed.
	if r := payout("ba_two", 1501); r.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || r.GetReasonCode() != "window_amount_exceeded" {
		t.Errorf("payout of free+1: %s %s", r.GetVerdict(), r.GetReasonCode())
	}
	if r := payout("ba_two", 1500); r.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Errorf("payout of the free amount: %s %s %s", r.GetVerdict(), r.GetReasonCode(), r.GetReason())
	}
	u = h.usage(t, hash, "")
	want = map[string]string{"WINDOW_SCOPE_AGENT " + h.agentID: "4 6000 USD", "WINDOW_SCOPE_PAYEE ba_one": "1",
		"WINDOW_SCOPE_PAYEE ba_two": "1", "WINDOW_SCOPE_PAYEE pi_bench": "2"}
	if got := u.windows(); !equalMaps(got, want) {
		t.Errorf("windows after = %v, want %v", got, want)
	}
	if b := u.Usage.Budgets[0]; b.HeldMinor != "6000" || b.FreeMinor != "4000" {
		t.Errorf("budget after = %+v", b)
	}

	// An applied refund moves from held to spent.
	h.sendAndCommit(t, allowed, "pi_bench", 1000)
	u = h.usage(t, hash, "?payee=ba_nobody")
	if b := u.Usage.Budgets[0]; b.HeldMinor != "5000" || b.SpentMinor != "1000" || b.FreeMinor != "4000" {
		t.Errorf("budget after the commit = %+v", b)
	}
	// Asked for one payee key, the payee window is reported for it, even empty.
	want = map[string]string{"WINDOW_SCOPE_AGENT " + h.agentID: "4 6000 USD", "WINDOW_SCOPE_PAYEE ba_nobody": "0"}
	if got := u.windows(); !equalMaps(got, want) {
		t.Errorf("windows for ba_nobody = %v, want %v", got, want)
	}
	// The applied refund leaves the agent's window an hour after its
	// answer was recorded: after this test began, before an hour from now.
	asOf, _ = time.Parse(time.RFC3339Nano, u.Usage.AsOf)
	for _, w := range u.Usage.Windows {
		release, err := time.Parse(time.RFC3339Nano, w.NextReleaseTime)
		switch {
		case w.Key == "ba_nobody" && w.NextReleaseTime != "":
			t.Errorf("an empty window has a release time: %+v", w)
		case w.Key != "ba_nobody" && (err != nil || release.Before(before.Add(time.Hour)) || release.After(asOf.Add(time.Hour))):
			t.Errorf("window %s %s: next release %s, want the refund's answer + 1h (as of %s)", w.Scope, w.Key, w.NextReleaseTime, u.Usage.AsOf)
		}
	}

	// gRPC answers the same; another owner learns nothing; bad input is refused.
	client, ctx := ownerGRPC(h)
	g, err := client.GetMandateUsage(ctx, &countersignv1.GetMandateUsageRequest{MandateHash: hash})
	if err != nil || len(g.GetUsage().GetWindows()) != 4 || g.GetUsage().GetBudgets()[0].GetSpentMinor() != 1000 {
		t.Fatalf("gRPC GetMandateUsage = %v, %v", g, err)
	}
	other := freshOwnerToken(t, h, "other owner")
	if s, body := h.rest(t, "GET", "/v1/mandates/"+hash+"/usage", other, nil); s != 404 || strings.Contains(body, "USD") {
		t.Errorf("another owner's GET usage = %d %s", s, body)
	}
	octx := metadata.AppendToOutgoingContext(context.Background(), "authorization", other)
	if _, err := client.GetMandateUsage(octx, &countersignv1.GetMandateUsageRequest{MandateHash: hash}); status.Code(err) != codes.NotFound {
		t.Errorf("another owner's gRPC GetMandateUsage: %v", err)
	}
	for _, path := range []string{"/v1/mandates/" + strings.ToUpper(hash) + "/usage", "/v1/mandates/" + hash + "/usage?payee=" + strings.Repeat("p", 256)} {
		if s, body := h.rest(t, "GET", path, "Bearer "+h.ownerToken, nil); s != 400 {
			t.Errorf("GET %s = %d %s, want 400", path[:40], s, body)
		}
	}
}

// roomyOwnerQuota lifts the owner API's rate limit for tests that make
// many owner calls in a row.
var roomyOwnerQuota = harnessOption{cfg: func(c *config.Config) { c.OwnerQuotaRate, c.OwnerQuotaBurst = 1000, 1000 }}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestMandateYAMLRoundTrips: the YAML of a stored mandate, as the REST
// gateway serves it, parses with the CLI's parser back to the identical
// mandate, with the same hash.
func TestMandateYAMLRoundTrips(t *testing.T) {
	h := bareRailHarness(t)
	m := mandateFor(h)
	m.AllowedPayees = []string{"ba_two", "ba_one"}
	m.Grants[0].Currencies = []string{"USD", "EUR"}
	m.Budgets = []*countersignv1.Money{{AmountMinor: 10000, Currency: "USD"}, {AmountMinor: 900, Currency: "EUR"}}
	m.Windows = []*countersignv1.Window{{Scope: countersignv1.WindowScope_WINDOW_SCOPE_PAYEE, Duration: durationpb.New(90 * time.Minute), MaxCalls: 2}}
	m.FeeBudget = &countersignv1.Money{AmountMinor: 500, Currency: "USD"}
	m.ApprovalTtl = durationpb.New(time.Hour)
	hash := applyMandateTo(t, h, m)

	s, body := h.rest(t, "GET", "/v1/mandates/"+hash, "Bearer "+h.ownerToken, nil)
	var got struct {
		Mandate struct {
			MandateHash string `json:"mandateHash"`
			YAML        string `json:"yaml"`
		} `json:"mandate"`
	}
	if s != 200 || json.Unmarshal([]byte(body), &got) != nil || got.Mandate.YAML == "" {
		t.Fatalf("GET mandate = %d %s", s, body)
	}
	parsed, err := mandate.Parse([]byte(got.Mandate.YAML))
	if err != nil {
		t.Fatalf("the CLI's parser refuses the served YAML: %v\n%s", err, got.Mandate.YAML)
	}
	again, err := mandate.Hash(parsed)
	if err != nil || again != hash || got.Mandate.MandateHash != hash {
		t.Fatalf("hash of the parsed YAML = %s (%v), stored %s", again, err, hash)
	}
	stored, err := h.store.GetMandate(context.Background(), hash)
	if err != nil {
		t.Fatal(err)
	}
	want, err := mandate.FromCanonical(stored.Canonical)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(parsed, want) {
		t.Fatalf("parsed YAML = %v, stored %v", parsed, want)
	}
}

// restLive is GetApprovalResponse.live as grpc-gateway writes it.
type restLive struct {
	Live struct {
		AsOf       string `json:"asOf"`
		Refundable *struct {
			AmountMinor string `json:"amountMinor"`
			Currency    string `json:"currency"`
		} `json:"refundable"`
		RailRefundable *struct {
			AmountMinor string `json:"amountMinor"`
		} `json:"railRefundable"`
		LedgerOutstanding *struct {
			AmountMinor string `json:"amountMinor"`
		} `json:"ledgerOutstanding"`
		RefundableError string `json:"refundableError"`
		MandateUsage    *struct {
			MandateHash string            `json:"mandateHash"`
			Windows     []json.RawMessage `json:"windows"`
		} `json:"mandateUsage"`
	} `json:"live"`
}

// TestApprovalLiveIsTheValueGatesView: GetApproval of a held refund shows
// what G2 would hold it to now (the rail's refundable balance less what the
// ledger has in flight on the payment), read with one rail call; ListApprovals
// reads nothing at the rail; a rail that is down is reported, not failed;
// another owner gets NotFound.
func TestApprovalLiveIsTheValueGatesView(t *testing.T) {
	h := bareRailHarness(t)
	// Small enough for the gate to refuse what exceeds it.
	if _, err := h.mock.AddPayment(mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_live", Amount: 10000, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	// An ALLOW left in flight under a budgeted mandate, then an
	// approval_required one (the newer active mandate applies).
	applyMandateTo(t, h, mandateFor(h))
	if r := h.decide(t, refund("pi_live", 3000, "")); r.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("in-flight refund: %s %s", r.GetVerdict(), r.GetReasonCode())
	}
	m := mandateFor(h)
	m.Purpose = "approval required"
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	m.Windows = []*countersignv1.Window{{Scope: countersignv1.WindowScope_WINDOW_SCOPE_PAYEE, Duration: durationpb.New(time.Hour), MaxCalls: 5}}
	hash := applyMandateTo(t, h, m)
	held := h.decide(t, refund("pi_live", 4000, ""))
	if held.GetVerdict() != countersignv1.Verdict_VERDICT_HOLD {
		t.Fatalf("refund: %s %s %s", held.GetVerdict(), held.GetReasonCode(), held.GetReason())
	}
	ap := pendingApproval(t, h, held.GetIntent().GetSik())

	reads := func() int {
		n := 0
		for _, r := range h.mock.Journal().Requests {
			if r.Method == "GET" {
				n++
			}
		}
		return n
	}
	n := reads()
	if s, body := h.rest(t, "GET", "/v1/approvals", "Bearer "+h.ownerToken, nil); s != 200 || strings.Contains(body, `"live":`) {
		t.Fatalf("GET /v1/approvals = %d %s", s, body)
	}
	if reads() != n {
		t.Errorf("ListApprovals read the rail %d times", reads()-n)
	}
	s, body := h.rest(t, "GET", "/v1/approvals/"+ap.GetApprovalId(), "Bearer "+h.ownerToken, nil)
	var got restLive
	if s != 200 || json.Unmarshal([]byte(body), &got) != nil || got.Live.Refundable == nil {
		t.Fatalf("GET approval = %d %s", s, body)
	}
	if reads() != n+1 {
		t.Errorf("GetApproval read the rail %d times, want 1", reads()-n)
	}
	l := got.Live
	if l.Refundable.AmountMinor != "7000" || l.Refundable.Currency != "USD" || l.RailRefundable.AmountMinor != "10000" ||
		l.LedgerOutstanding.AmountMinor != "3000" || l.RefundableError != "" || l.AsOf == "" {
		t.Errorf("live = %s", body)
	}
	if l.MandateUsage == nil || l.MandateUsage.MandateHash != hash || len(l.MandateUsage.Windows) != 1 {
		t.Errorf("live mandate usage = %s", body)
	}
	// The gate agrees: 7001 is refused as over what is refundable, 7000 is not.
	applyMandateTo(t, h, func() *countersignv1.Mandate { m := mandateFor(h); m.Purpose = "budgeted again"; return m }())
	if r := h.decide(t, refund("pi_live", 7001, "")); r.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || r.GetReasonCode() != "amount_exceeds_refundable" {
		t.Errorf("refund of refundable+1: %s %s", r.GetVerdict(), r.GetReasonCode())
	}
	if r := h.decide(t, refund("pi_live", 7000, "")); r.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Errorf("refund of refundable: %s %s %s", r.GetVerdict(), r.GetReasonCode(), r.GetReason())
	}

	// The rail is down: the approval is still answered, with the reason.
	if err := h.mock.SetFaults(mockrail.Fault{Profile: mockrail.FaultResetBeforeApply, Method: "GET"}); err != nil {
		t.Fatal(err)
	}
	client, ctx := ownerGRPC(h)
	g, err := client.GetApproval(ctx, &countersignv1.GetApprovalRequest{ApprovalId: ap.GetApprovalId()})
	if err != nil || g.GetLive().GetRefundable() != nil || g.GetLive().GetRefundableError() == "" || g.GetApproval().GetApprovalId() != ap.GetApprovalId() {
		t.Fatalf("GetApproval with the rail down = %v, %v", g, err)
	}
	if strings.Contains(g.GetLive().GetRefundableError(), mockrail.DefaultStripeKey) {
		t.Fatalf("the refundable error carries the rail key: %s", g.GetLive().GetRefundableError())
	}

	other := freshOwnerToken(t, h, "other owner")
	if s, body := h.rest(t, "GET", "/v1/approvals/"+ap.GetApprovalId(), other, nil); s != 404 || strings.Contains(body, "pi_live") {
		t.Errorf("another owner's GET approval = %d %s", s, body)
	}
}

// TestIntentTimelineAndSubjectFilter: GetIntent carries every audit record
// of the intent in order, its reconciliation findings and the stored rail
// answer a duplicate replays; ListIntents filters by subject; another
// owner sees none of it.
func TestIntentTimelineAndSubjectFilter(t *testing.T) {
	h := railHarness(t, roomyOwnerQuota, noReconcileDelay)
	client, ctx := ownerGRPC(h)

	applied := h.allow(t, 1200)
	h.sendAndCommit(t, applied, "pi_bench", 1200)
	g, err := client.GetIntent(ctx, &countersignv1.GetIntentRequest{RailAccount: "acct_bench", Sik: applied.GetIntent().GetSik()})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, tr := range g.GetTransitions() {
		events = append(events, tr.GetEvent().String())
	}
	// Born IN_FLIGHT (one record), then applied.
	if strings.Join(events, ",") != "INTENT_EVENT_ATTEMPT_STARTED,INTENT_EVENT_RAIL_APPLIED" {
		t.Errorf("transitions = %v", events)
	}
	sa := g.GetStoredAnswer()
	if sa.GetSource() != countersignv1.StoredRailAnswerSource_STORED_RAIL_ANSWER_SOURCE_RAIL_RESPONSE || sa.GetHttpStatus() != 200 ||
		sa.GetRailEntityId() == "" || sa.GetRailEntityId() != g.GetIntent().GetRailEntityId() || !strings.Contains(sa.GetBody(), sa.GetRailEntityId()) ||
		sa.GetAttemptSeq() != 1 {
		t.Errorf("stored answer = %v", sa)
	}
	if len(g.GetFindings()) != 0 {
		t.Errorf("findings of an intent never reconciled = %v", g.GetFindings())
	}

	absent := h.confirmAbsent(t, 1300)
	g, err = client.GetIntent(ctx, &countersignv1.GetIntentRequest{RailAccount: "acct_bench", Sik: absent.GetIntent().GetSik()})
	if err != nil {
		t.Fatal(err)
	}
	if fs := g.GetFindings(); len(fs) != 1 || fs[0].GetOutcome() != countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_CONFIRMED_ABSENT ||
		!fs[0].GetPaginationExhausted() || fs[0].GetAttemptSeq() != 1 || fs[0].GetFindTime() == nil {
		t.Errorf("findings = %v", fs)
	}
	if g.GetStoredAnswer() != nil || len(g.GetTransitions()) < 4 {
		t.Errorf("confirmed absent: stored answer %v, %d transitions", g.GetStoredAnswer(), len(g.GetTransitions()))
	}
	for i, tr := range g.GetTransitions() {
		if i > 0 && tr.GetRecordId() <= g.GetTransitions()[i-1].GetRecordId() {
			t.Errorf("transitions out of order: %v", g.GetTransitions())
		}
	}

	// A payout has its destination as subject.
	amount := int64(500)
	if r := h.decide(t, &countersignv1.ProposedAction{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT,
		Subject: "ba_filter", Payee: "ba_filter", AmountMinor: &amount, Currency: "USD"}); r.GetVerdict() == countersignv1.Verdict_VERDICT_BLOCK {
		t.Fatalf("payout: %s %s", r.GetVerdict(), r.GetReasonCode())
	}
	for _, c := range []struct {
		query string
		want  int
	}{{"?subject=ba_filter", 1}, {"?subject=pi_bench", 2}, {"?subject=pi_bench&railAccount=acct_bench", 2}, {"?subject=nothing", 0}, {"", 3}} {
		s, body := h.rest(t, "GET", "/v1/intents"+c.query, "Bearer "+h.ownerToken, nil)
		var l struct {
			Intents []struct {
				Subject string `json:"subject"`
			} `json:"intents"`
		}
		if s != 200 || json.Unmarshal([]byte(body), &l) != nil || len(l.Intents) != c.want {
			t.Errorf("GET /v1/intents%s = %d %s, want %d intents", c.query, s, body, c.want)
		}
	}
	if s, _ := h.rest(t, "GET", "/v1/intents?subject="+strings.Repeat("s", 256), "Bearer "+h.ownerToken, nil); s != 400 {
		t.Errorf("a 256-character subject = %d, want 400", s)
	}

	other := freshOwnerToken(t, h, "other owner")
	if s, body := h.rest(t, "GET", "/v1/intents?subject=pi_bench", other, nil); s != 200 || strings.Contains(body, "pi_bench") {
		t.Errorf("another owner lists by subject: %d %s", s, body)
	}
	if s, body := h.rest(t, "GET", "/v1/intents/acct_bench/"+applied.GetIntent().GetSik(), other, nil); s != 404 || strings.Contains(body, "pi_bench") {
		t.Errorf("another owner's GetIntent = %d %s", s, body)
	}
}
