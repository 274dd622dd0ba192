package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/metrics"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// rig is an engine over a real ledger and a mock Stripe rail holding pi_1,
// with one agent whose mandate grants refunds in USD.
type rig struct {
	e           *Engine
	store       *ledger.Store
	secret      string
	mandateHash string
	url         string
	mock        *mockrail.Server
	railURL     string
}

func newRig(t *testing.T, shape ...func(*countersignv1.Mandate)) *rig {
	t.Helper()
	return newRigOn(t, rigRail{account: "acct_1", rail: sik.RailStripe, host: "api.stripe.com", key: mockrail.DefaultStripeKey,
		adapter: func() rail.Adapter { return stripe.New() }, mandateRail: countersignv1.Rail_RAIL_STRIPE,
		kind: countersignv1.ActionKind_ACTION_KIND_REFUND, currency: "USD",
		payments: []mockrail.Payment{{Rail: mockrail.Stripe, ID: "pi_1", Amount: 1 << 40, Currency: "usd"}}}, shape...)
}

// rigRail is the rail account a rig's engine guards and what its agent's
// mandate grants there.
type rigRail struct {
	account     string
	rail        sik.Rail
	host        string
	key         string // the key file's content
	adapter     func() rail.Adapter
	mandateRail countersignv1.Rail
	kind        countersignv1.ActionKind
	currency    string
	payments    []mockrail.Payment
}

// newRigOn is an engine over a real ledger and a mock rail for rr, with one
// agent whose mandate grants rr's kind of action in rr's currency.
func newRigOn(t *testing.T, rr rigRail, shape ...func(*countersignv1.Mandate)) *rig {
	t.Helper()
	ctx := context.Background()
	mock, err := mockrail.New(mockrail.WithPayments(rr.payments...))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(mock)
	t.Cleanup(func() { mock.Close(); ts.Close() })
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(rr.key), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rails.New(rails.File{Rails: []rails.AccountConfig{{Account: rr.account, Rail: string(rr.rail),
		Hosts: []string{rr.host}, BaseURL: ts.URL, KeyFile: keyFile}}},
		rails.Adapters{rr.rail: rr.adapter}, nil)
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
	if _, err := store.GrantRailAccount(ctx, rr.account, owner.ID); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	m := &countersignv1.Mandate{
		Rail: rr.mandateRail, RailAccount: rr.account, AgentId: agent.ID, Purpose: "engine tests",
		ValidFrom: timestamppb.New(now.Add(-time.Hour)), ValidUntil: timestamppb.New(now.Add(24 * time.Hour)),
		Mode:   countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{{ActionKind: rr.kind, MaxAmountMinor: 1 << 40, Currencies: []string{rr.currency}}},
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

// principal is the rig's agent and credential as the ledger holds them.
func (r *rig) principal(t *testing.T) ledger.Principal {
	t.Helper()
	hash, err := credential.Hash(r.secret)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.store.LookupCredential(context.Background(), hash)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// refundOf is a refund of amount minor units of USD on pi_1.
func (r *rig) refundOf(amount int) Request {
	req := r.refund()
	req.Body = []byte("payment_intent=pi_1&amount=" + strconv.Itoa(amount))
	return req
}

// refund is the same refund of 10.00 USD on pi_1 every time.
func (r *rig) refund() Request {
	return Request{Source: SourceExtAuthz, RequestID: "req", Credential: r.secret, Method: "POST", Host: "api.stripe.com",
		Path: "/v1/refunds", Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"},
		Body: []byte("payment_intent=pi_1&amount=1000")}
}

func (r *rig) attempts(t *testing.T, ref *IntentRef) (ledger.Intent, []ledger.Attempt) {
	t.Helper()
	it, atts, err := r.store.GetIntent(context.Background(), ledger.Key{RailAccount: ref.RailAccount, SIK: ref.SIK})
	if err != nil {
		t.Fatal(err)
	}
	return it, atts
}

// TestConcurrentIdenticalRequestsMakeOneAttempt: I1 decides the race on the
// key, whether the fresh write or the locking transaction gets there first.
func TestConcurrentIdenticalRequestsMakeOneAttempt(t *testing.T) {
	r := newRig(t)
	const n = 40
	outs := make([]Outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); outs[i] = r.e.Decide(context.Background(), r.refund()) }()
	}
	wg.Wait()
	allowed := 0
	var ref *IntentRef
	for _, o := range outs {
		if o.Verdict == Allow {
			allowed++
			ref = o.Intent
		} else if o.ReasonCode != ReasonDuplicateInFlight {
			t.Fatalf("a duplicate was answered %s (%s), not in-flight", o.ReasonCode, o.Reason)
		}
	}
	if allowed != 1 {
		t.Fatalf("%d of %d identical requests allowed; want exactly one", allowed, n)
	}
	if _, atts := r.attempts(t, ref); len(atts) != 1 {
		t.Fatalf("%d attempts; want one", len(atts))
	}
}

// TestRejectedIsReopenedWithANewGeneration: after a definite rejection the
// identical request is a new attempt under a new stamp (the rail kept the
// rejection under the old one).
func TestRejectedIsReopenedWithANewGeneration(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	first := r.e.Decide(ctx, r.refund())
	if first.Verdict != Allow {
		t.Fatalf("first = %s %s", first.ReasonCode, first.Reason)
	}
	it, _, err := r.e.Commit(ctx, *first.Intent, rail.Response{Status: 400, Body: []byte(`{"error":{"type":"invalid_request_error","message":"no"}}`)})
	if err != nil || it.State != intent.FailedTerminal {
		t.Fatalf("commit of a 400 = %s, %v", it.State, err)
	}
	again := r.e.Decide(ctx, r.refund())
	if again.Verdict != Allow || again.Intent.AttemptSeq != 2 || again.Intent.Stamp == first.Intent.Stamp {
		t.Fatalf("reopen = %s %s attempt %d stamp %q (first %q)", again.Verdict, again.ReasonCode, again.Intent.AttemptSeq, again.Intent.Stamp, first.Intent.Stamp)
	}
	if _, atts := r.attempts(t, again.Intent); len(atts) != 2 || atts[1].StampGeneration != 1 {
		t.Fatalf("attempts %+v; want a second attempt at generation 1", atts)
	}
}

// TestUnknownIsReconciledBeforeARetry: an ambiguous answer starts nothing
// until reconciliation proves the action absent; the retry keeps the stamp,
// so a late copy of the first request and the retry still deduplicate.
func TestUnknownIsReconciledBeforeARetry(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	first := r.e.Decide(ctx, r.refund())
	if first.Verdict != Allow {
		t.Fatalf("first = %s %s", first.ReasonCode, first.Reason)
	}
	// It left stamped (ext_proc's mark), so a listing can prove it absent.
	sent, err := r.e.MarkSent(ctx, *first.Intent, true)
	if err != nil {
		t.Fatal(err)
	}
	if it, _, err := r.e.Commit(ctx, sent, rail.Response{TransportErr: errors.New("timeout")}); err != nil || it.State != intent.Unknown {
		t.Fatalf("commit of a timeout = %s, %v", it.State, err)
	}
	if out := r.e.Decide(ctx, r.refund()); out.Verdict == Allow || out.ReasonCode != ReasonReconciling {
		t.Fatalf("while UNKNOWN = %s %s; want a refusal that it is reconciling", out.Verdict, out.ReasonCode)
	}
	key := ledger.Key{RailAccount: first.Intent.RailAccount, SIK: first.Intent.SIK}
	if _, err := r.store.ClaimReconcile(ctx, "rec", time.Minute, 10, &key); err != nil {
		t.Fatal(err)
	}
	if it, err := r.store.RecordFinding(ctx, ledger.Finding{Key: key, AttemptSeq: 1, Outcome: ledger.FindingAbsent, Pages: 1, PaginationExhausted: true, Owner: "rec"}); err != nil || it.State != intent.ConfirmedNotApplied {
		t.Fatalf("finding = %s, %v", it.State, err)
	}
	retry := r.e.Decide(ctx, r.refund())
	if retry.Verdict != Allow || retry.Intent.AttemptSeq != 2 || retry.Intent.Stamp != first.Intent.Stamp {
		t.Fatalf("retry = %s %s attempt %d stamp %q; want attempt 2 under %q", retry.Verdict, retry.ReasonCode, retry.Intent.AttemptSeq, retry.Intent.Stamp, first.Intent.Stamp)
	}
}

// TestAppliedIsReplayedFromTheLedger: the identical request after APPLIED
// gets the stored answer and starts nothing.
func TestAppliedIsReplayedFromTheLedger(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	first := r.e.Decide(ctx, r.refund())
	if first.Verdict != Allow {
		t.Fatalf("first = %s %s", first.ReasonCode, first.Reason)
	}
	body := []byte(`{"id":"re_1","object":"refund","status":"succeeded","amount":1000,"currency":"usd","payment_intent":"pi_1","metadata":{"countersign_stamp":"` + first.Intent.Stamp + `"}}`)
	if it, _, err := r.e.Commit(ctx, *first.Intent, rail.Response{Status: 200, Headers: map[string]string{"content-type": "application/json"}, Body: body}); err != nil || it.State != intent.Applied {
		t.Fatalf("commit = %s, %v", it.State, err)
	}
	dup := r.e.Decide(ctx, r.refund())
	if !dup.Replayed || dup.HTTPStatus != 200 || string(dup.Body) != string(body) {
		t.Fatalf("duplicate = %s %s replayed=%v %d %s", dup.Verdict, dup.ReasonCode, dup.Replayed, dup.HTTPStatus, dup.Body)
	}
	if _, atts := r.attempts(t, first.Intent); len(atts) != 1 {
		t.Fatalf("%d attempts; want one", len(atts))
	}
}

// TestAllowKeepsEveryGateButNotItsSentence: an ALLOW's stored decision has
// each gate's verdict and reason code; the sentences of passing gates,
// which restate the intent and its mandate, are not written again.
func TestAllowKeepsEveryGateButNotItsSentence(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	req := r.refund()
	req.RequestID = "req-stored-gates"
	if out := r.e.Decide(ctx, req); out.Verdict != Allow || len(out.Gates) == 0 || out.Gates[0].Reason == "" {
		t.Fatalf("decide = %s %s, gates %+v (the answer keeps its sentences)", out.Verdict, out.ReasonCode, out.Gates)
	}
	ds, err := r.store.DecisionsByRequest(ctx, req.RequestID)
	if err != nil || len(ds) != 1 {
		t.Fatalf("decisions = %+v, %v", ds, err)
	}
	if len(ds[0].Gates) < 4 {
		t.Fatalf("stored gates %+v: want every gate", ds[0].Gates)
	}
	for _, g := range ds[0].Gates {
		if g.Gate == "" || g.ReasonCode == "" || (g.Verdict == string(Allow) && g.Reason != "") {
			t.Fatalf("stored gate %+v: want its verdict and code, and no sentence for a pass", g)
		}
	}
}

// revokingLedger revokes the credential (or its agent) just before the
// first fresh write: the revocation commits between the decision's read
// and its write, as an owner's can while the rail is being read.
type revokingLedger struct {
	*ledger.Store
	revoke func() error
	once   sync.Once
}

func (l *revokingLedger) Apply(ctx context.Context, w *ledger.Write) error {
	var err error
	l.once.Do(func() { err = l.revoke() })
	if err != nil {
		return err
	}
	return l.Store.Apply(ctx, w)
}

// TestRevocationBetweenReadAndWriteRefuses: the fresh write's share lock
// finds the credential (or agent) revoked, and the locking transaction it
// falls back to refuses too, on the principal as it is now.
func TestRevocationBetweenReadAndWriteRefuses(t *testing.T) {
	for _, what := range []string{"credential", "agent"} {
		t.Run(what, func(t *testing.T) {
			r := newRig(t)
			ctx := context.Background()
			p := r.principal(t)
			l := &revokingLedger{Store: r.store, revoke: func() error {
				if what == "agent" {
					return r.store.RevokeAgent(ctx, p.Agent.ID)
				}
				return r.store.RevokeCredential(ctx, p.Credential.ID)
			}}
			r.e.ledger = l
			out := r.e.Decide(ctx, r.refund())
			want := ReasonCredentialRevoked
			if what == "agent" {
				want = ReasonAgentRevoked
			}
			if out.Verdict == Allow || out.ReasonCode != want {
				t.Fatalf("decision after a revocation mid-way = %s %s (%s); want BLOCK %s", out.Verdict, out.ReasonCode, out.Reason, want)
			}
		})
	}
}

// TestExhaustedBudgetBlocksBeforeItHolds: under an approval_required
// mandate whose budget has no room, a new request is refused for the
// budget, not held for an approval it could never use (the fast write
// asserts the budget's room for a HOLD, which places no hold for the
// budget row's CHECK to refuse).
func TestExhaustedBudgetBlocksBeforeItHolds(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
		m.Budgets = []*countersignv1.Money{{AmountMinor: 1000, Currency: "USD"}}
	})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO mandate_budgets (mandate_hash, currency, budget_minor, reserved_minor) VALUES ($1, 'USD', 1000, 1000)`, r.mandateHash); err != nil {
		t.Fatal(err)
	}
	out := r.e.Decide(ctx, r.refund())
	if out.Verdict != Block || out.ReasonCode != "budget_exceeded" {
		t.Fatalf("decision = %s %s (%s); want BLOCK budget_exceeded", out.Verdict, out.ReasonCode, out.Reason)
	}
	if out.Intent != nil {
		t.Fatalf("a refused request left intent %+v", out.Intent)
	}
}

// TestRefundsOfOnePaymentNeverOverlap: two different refunds of one payment
// sent at once (600 and 500 of 1000 refundable, under a mandate of grants
// alone) are not both allowed: the second counts the first as outstanding.
func TestRefundsOfOnePaymentNeverOverlap(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	const pairs = 12
	for i := range pairs {
		if _, err := r.mock.AddPayment(mockrail.Payment{Rail: mockrail.Stripe, ID: fmt.Sprintf("pi_pair_%d", i), Amount: 1000, Currency: "usd"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range pairs {
		var wg sync.WaitGroup
		outs := make([]Outcome, 2)
		for j, amount := range []int{600, 500} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := r.refund()
				req.Body = []byte(fmt.Sprintf("payment_intent=pi_pair_%d&amount=%d", i, amount))
				outs[j] = r.e.Decide(ctx, req)
			}()
		}
		wg.Wait()
		if outs[0].Verdict == Allow && outs[1].Verdict == Allow {
			t.Fatalf("pair %d: both refunds allowed, 1100 of a 1000 payment", i)
		}
		if outs[0].Verdict != Allow && outs[1].Verdict != Allow {
			t.Fatalf("pair %d: neither allowed: %s %s / %s %s", i, outs[0].ReasonCode, outs[0].Reason, outs[1].ReasonCode, outs[1].Reason)
		}
	}
}

// TestAppliedActionUnderAnotherNameIsReplayed: a refund named by its
// charge is the action already applied by name of its payment; with the
// rail now showing too little refundable for it, the answer is still the
// stored replay, not the value gate's refusal.
func TestAppliedActionUnderAnotherNameIsReplayed(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if _, err := r.mock.AddPayment(mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_dup", ChargeID: "ch_dup", Amount: 1000, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	req := r.refund()
	req.Body = []byte("payment_intent=pi_dup&amount=600")
	first := r.e.Decide(ctx, req)
	if first.Verdict != Allow {
		t.Fatalf("first = %s %s", first.ReasonCode, first.Reason)
	}
	// Send it to the rail as Envoy would: stamped, with the rail key.
	body := string(req.Body) + "&" + url.QueryEscape(first.Intent.BodyField) + "=" + url.QueryEscape(first.Intent.BodyValue)
	hr, err := http.NewRequestWithContext(ctx, "POST", r.railURL+"/v1/refunds", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("content-type", "application/x-www-form-urlencoded")
	for k, v := range first.SetHeaders {
		hr.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("rail answered %d %s (%v)", resp.StatusCode, rb, err)
	}
	if it, _, err := r.e.Commit(ctx, *first.Intent, rail.Response{Status: 200, Headers: map[string]string{"content-type": "application/json"}, Body: rb}); err != nil || it.State != intent.Applied {
		t.Fatalf("commit = %s, %v", it.State, err)
	}
	again := r.refund()
	again.Body = []byte("charge=ch_dup&amount=600")
	dup := r.e.Decide(ctx, again)
	if !dup.Replayed || dup.ReasonCode != ReasonDuplicateApplied {
		t.Fatalf("the same refund named by its charge = %s %s (%s); want the replay of the applied one", dup.Verdict, dup.ReasonCode, dup.Reason)
	}
}

// readCountingLedger counts the response path's reads of an intent.
type readCountingLedger struct {
	*ledger.Store
	reads int
}

func (l *readCountingLedger) Intent(ctx context.Context, k ledger.Key) (ledger.Intent, error) {
	l.reads++
	return l.Store.Intent(ctx, k)
}

// TestStampedCommitStartsFromTheMark: the response path's commit starts
// from the intent its body-stamp mark returned (no read of its own), and
// when the intent moved after the mark (its lease lapsed to UNKNOWN), the
// commit's assertion sends it to the locking commit, which records the
// late answer without moving the intent.
func TestStampedCommitStartsFromTheMark(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	l := &readCountingLedger{Store: r.store}
	r.e.ledger = l
	answer := func(ref IntentRef) rail.Response {
		return rail.Response{Status: 200, Headers: map[string]string{"content-type": "application/json"},
			Body: []byte(`{"id":"re_mark","object":"refund","amount":1000,"currency":"usd","status":"succeeded","payment_intent":"pi_1","metadata":{"countersign_sik":"` + ref.BodyValue + `"}}`)}
	}

	out := r.e.Decide(ctx, r.refund())
	if out.Verdict != Allow {
		t.Fatalf("decide = %s %s", out.Verdict, out.Reason)
	}
	ref, err := r.e.MarkSent(ctx, *out.Intent, true)
	if err != nil || !ref.BodyStamped || ref.seen == nil || ref.seen.State != intent.InFlight {
		t.Fatalf("mark = %+v, %v", ref, err)
	}
	it, c, err := r.e.Commit(ctx, ref, answer(ref))
	if err != nil || it.State != intent.Applied || c.EntityID != "re_mark" {
		t.Fatalf("commit = %s %+v, %v", it.State, c, err)
	}
	if l.reads != 0 {
		t.Fatalf("the commit read the intent %d times; the mark had read it", l.reads)
	}

	// A mark, then the lease lapses before the answer arrives.
	req := r.refund()
	req.Body = []byte("payment_intent=pi_1&amount=2000")
	out = r.e.Decide(ctx, req)
	if out.Verdict != Allow {
		t.Fatalf("decide = %s %s", out.Verdict, out.Reason)
	}
	ref, err = r.e.MarkSent(ctx, *out.Intent, true)
	if err != nil {
		t.Fatal(err)
	}
	k := ledger.Key{RailAccount: ref.RailAccount, SIK: ref.SIK}
	if err := r.store.InTx(ctx, func(tx *ledger.Tx) error {
		cur, err := tx.LockIntent(ctx, k)
		if err != nil {
			return err
		}
		later := time.Hour
		_, err = tx.Transition(ctx, cur, intent.LeaseExpired, ledger.TransitionOpts{Reason: "lease lapsed in the test", ReconcileIn: &later})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	it, _, err = r.e.Commit(ctx, ref, answer(ref))
	if err != nil || it.State != intent.Unknown {
		t.Fatalf("commit after the intent moved = %s, %v; want it left UNKNOWN for the reconciler", it.State, err)
	}
	got, atts := r.attempts(t, &ref)
	if got.State != intent.Unknown || len(atts) != 1 || atts[0].Response == nil || atts[0].Response.Status != 200 {
		t.Fatalf("after a late answer: %s, attempts %+v", got.State, atts)
	}
}

// TestHeldRequestsAreBounded: an agent under an approval_required mandate
// holds at most MaxPendingApprovals requests waiting for its owner; the
// next one is refused (too_many_pending_approvals) and leaves no intent,
// so it may be sent again later; the same held request again is still
// held, not refused; and the owner's decision makes room for one more.
func TestHeldRequestsAreBounded(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) { m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED })
	r.e.opts.MaxPendingApprovals = 2
	ctx := context.Background()
	refund := r.refundOf
	expect(t, r.e.Decide(ctx, refund(100)), Hold, "approval_required")
	expect(t, r.e.Decide(ctx, refund(200)), Hold, "approval_required")
	third := r.e.Decide(ctx, refund(300))
	expect(t, third, Block, ReasonTooManyPendingApprovals)
	if !strings.Contains(third.Reason, "2 requests waiting for its owner's approval") || !strings.Contains(string(third.Body), ReasonTooManyPendingApprovals) {
		t.Fatalf("refusal = %q, body %s", third.Reason, third.Body)
	}
	if third.Intent != nil {
		t.Fatalf("the refused request names intent %+v", third.Intent)
	}
	rows := r.approvalRows(t)
	if len(rows) != 2 {
		t.Fatalf("approvals %+v, want the two held", rows)
	}
	// The first again: held still, its approval kept (no new one), not
	// refused at the bound.
	expect(t, r.e.Decide(ctx, refund(100)), Hold, "approval_required")
	if again := r.approvalRows(t); len(again) != 2 || again[0] != rows[0] {
		t.Fatalf("approvals after the held request again = %+v, want %+v", again, rows)
	}
	if _, err := r.store.Reject(ctx, rows[0].owner, rows[0].id, "not this one"); err != nil {
		t.Fatal(err)
	}
	expect(t, r.e.Decide(ctx, refund(300)), Hold, "approval_required")
	expect(t, r.e.Decide(ctx, refund(400)), Block, ReasonTooManyPendingApprovals)
}

// TestHeldRequestsSentAgainDoNotDeadlock: new requests an approval_required
// mandate holds (the fresh write) race the same held request sent again
// (the locking path) for one agent and mandate. Both take the mandate's,
// the subject's and then the agent's approvals lock in that order, so no
// deadlock is ever found and every answer is a HOLD. (With the fresh
// write taking the approvals lock first, 320 such decisions met about a
// hundred deadlocks and dozens were denied as internal errors.)
func TestHeldRequestsSentAgainDoNotDeadlock(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
		m.Budgets = []*countersignv1.Money{{Currency: "USD", AmountMinor: 1 << 40}}
	})
	r.e.opts.MaxPendingApprovals = 100000
	ctx := context.Background()
	refund := r.refundOf
	expect(t, r.e.Decide(ctx, refund(7)), Hold, "approval_required")
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadlocks := func() int64 {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := deadlocks()
	var wg sync.WaitGroup
	var next atomic.Int64
	next.Store(1000)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 30 {
				req := refund(7) // the held one again: the locking path
				if g%2 == 0 {
					req = refund(int(next.Add(1))) // a new one: the fresh write
				}
				if out := r.e.Decide(ctx, req); out.Verdict != Hold {
					t.Errorf("decision = %s %s (%s); want HOLD", out.Verdict, out.ReasonCode, out.Reason)
				}
			}
		}()
	}
	wg.Wait()
	if n := deadlocks() - before; n != 0 {
		t.Fatalf("PostgreSQL found %d deadlocks among held requests", n)
	}
}

// factReadCountingLedger counts the decisions' reads of the ledger.
type factReadCountingLedger struct {
	*ledger.Store
	reads atomic.Int64
}

func (l *factReadCountingLedger) ReadForDecision(ctx context.Context, r ledger.DecisionRead) (ledger.DecisionFacts, error) {
	l.reads.Add(1)
	return l.Store.ReadForDecision(ctx, r)
}

// decisionCounts counts an engine's reads of the ledger and of the rail.
type decisionCounts struct {
	l     *factReadCountingLedger
	spans *tracetest.SpanRecorder
}

// countDecisions gives r an engine like its own that counts them.
func countDecisions(r *rig) *decisionCounts {
	c := &decisionCounts{l: &factReadCountingLedger{Store: r.store}, spans: tracetest.NewSpanRecorder()}
	opts := r.e.opts
	opts.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(c.spans))
	r.e = New(c.l, opts, r.e.log, metrics.New())
	return c
}

func (c *decisionCounts) counts() (reads, railReads int) {
	for _, s := range c.spans.Ended() {
		if s.Name() == spanResolve {
			railReads++
		}
	}
	return int(c.l.reads.Load()), railReads
}

// TestACountRefusalOnRememberedFactsIsDecidedUnderLocksAtOnce: a new
// action whose fresh write is refused by a count (a full window), after
// its first statement found the remembered principal and mandate current,
// goes to the locking transaction on those facts: one rail read and no
// read of the ledger per request, as on facts just read.
func TestACountRefusalOnRememberedFactsIsDecidedUnderLocksAtOnce(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Windows = []*countersignv1.Window{{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT, Duration: durationpb.New(time.Hour), MaxCalls: 1}}
	})
	c := countDecisions(r)
	if out := r.e.Decide(ctx, r.refundOf(100)); out.Verdict != Allow {
		t.Fatalf("the first refund: %s %s", out.ReasonCode, out.Reason)
	}
	for i := range 3 {
		out := r.e.Decide(ctx, r.refundOf(200+i))
		if out.Verdict != Block || !strings.Contains(out.Reason, "window") {
			t.Fatalf("refund %d over a full window: %s %s (%s)", i, out.Verdict, out.ReasonCode, out.Reason)
		}
	}
	if reads, railReads := c.counts(); reads != 1 || railReads != 4 {
		t.Fatalf("%d reads of the ledger and %d of the rail for four refunds, want 1 and 4", reads, railReads)
	}
}

// TestAllowOnRememberedFactsReadsNothingFirst: after one decision of the
// agent on the account, a new action is decided on the principal and
// mandate the engine remembers (its rail read and its write, no read of
// the ledger first); a request the engine sent before is decided on a read
// (answered from its intent); one the engine forgot goes to the write,
// which refuses the existing intent, and is decided again on a read with
// the same answer; and a revocation refuses the very next decision for the
// revocation, though the remembered facts said the credential was live.
func TestAllowOnRememberedFactsReadsNothingFirst(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	c := countDecisions(r)
	step := func(what string, amount int, wantCode string, wantReads, wantRailReads int) Outcome {
		t.Helper()
		out := r.e.Decide(ctx, r.refundOf(amount))
		if out.ReasonCode != wantCode {
			t.Fatalf("%s: %s %s (%s), want %s", what, out.Verdict, out.ReasonCode, out.Reason, wantCode)
		}
		if reads, railReads := c.counts(); reads != wantReads || railReads != wantRailReads {
			t.Fatalf("%s: %d reads of the ledger and %d of the rail in all, want %d and %d", what, reads, railReads, wantReads, wantRailReads)
		}
		return out
	}
	step("the first decision", 100, ReasonAllowed, 1, 1)
	second := step("a new action on remembered facts", 200, ReasonAllowed, 1, 2)
	// (In flight, its lease may have lapsed: the rail is read as on any
	// read, not by remembered facts.)
	step("the same request again", 200, ReasonDuplicateInFlight, 2, 3)
	r.e.aliases = newSeenAliases() // as if another process had decided it
	// The write found the facts current and the intent existing: decided
	// under its locks at once, on those facts.
	dup := step("the same request, forgotten by the engine", 200, ReasonDuplicateInFlight, 2, 4)
	if dup.Intent == nil || dup.Intent.SIK != second.Intent.SIK {
		t.Fatalf("the forgotten duplicate names intent %v, want %s", dup.Intent, second.Intent.SIK)
	}

	p := r.principal(t)
	step("a new action on facts remembered live", 300, ReasonAllowed, 2, 5)
	if err := r.store.RevokeCredential(ctx, p.Credential.ID); err != nil {
		t.Fatal(err)
	}
	step("a new action after the revocation", 400, ReasonCredentialRevoked, 3, 6)
	// The facts that said live are forgotten: the revoked agent's next
	// request costs the rail nothing.
	step("the next one", 500, ReasonCredentialRevoked, 4, 6)
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var intents int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM intents WHERE amount_minor >= 400`).Scan(&intents); err != nil {
		t.Fatal(err)
	}
	if intents != 0 {
		t.Fatalf("the refused action left %d intents", intents)
	}
}

// TestNativeExtraCannotCarryCountersignsMarkers: a native action's extra
// fields may not be the key's own markers ("amount": "full" would make an
// action with an amount read back as a full refund).
func TestNativeExtraCannotCarryCountersignsMarkers(t *testing.T) {
	r := newRig(t)
	amount := int64(500)
	for _, k := range []string{"amount", "countersign.alias"} {
		out := r.e.DecideAction(context.Background(), Request{Source: SourceDecide, RequestID: "native-" + k, Credential: r.secret}, "acct_1",
			rail.Action{Kind: sik.KindRefund, Subject: "pi_1", AmountMinor: &amount, Extra: map[string]string{k: "full"}})
		if out.Verdict != Block || out.ReasonCode != ReasonInvalidAction || !strings.Contains(out.Reason, k) {
			t.Errorf("extra %q: %s %s: %s", k, out.Verdict, out.ReasonCode, out.Reason)
		}
	}
	// Another extra field is the action's, as before.
	out := r.e.DecideAction(context.Background(), Request{Source: SourceDecide, RequestID: "native-reason", Credential: r.secret}, "acct_1",
		rail.Action{Kind: sik.KindRefund, Subject: "pi_1", AmountMinor: &amount, Extra: map[string]string{"reason": "requested_by_customer"}})
	if out.ReasonCode == ReasonInvalidAction {
		t.Fatalf("extra reason refused: %s", out.Reason)
	}
}
