package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/testing/testclock"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestWindowCurrent: an aliased intent answers a request from the ledger
// when it has no idempotency window, or when it is its family's newest
// intent and still the action the request is (unresolved, or within
// its window since it last moved); a key whose window cannot be read never does (the request
// is keyed afresh).
func TestWindowCurrent(t *testing.T) {
	at := time.Unix(1_800_000_000, 500_000_000)
	e := &Engine{now: func() time.Time { return at }}
	k := ledger.Key{RailAccount: "acct_1", SIK: "A"}
	other := ledger.Key{RailAccount: "acct_1", SIK: "B"}
	// age is how long ago the intent last moved; it was born an hour
	// before that (the window runs from its last move, not its birth).
	it := func(window string, state intent.State, age time.Duration) ledger.Intent {
		return ledger.Intent{Key: k, State: state, CreatedAt: at.Add(-age - time.Hour), UpdatedAt: at.Add(-age), Canonical: fmt.Sprintf(`{"window":%q}`, window)}
	}
	latest := func(i ledger.Intent) *ledger.Intent { return &i }
	resolvedNotApplied := func(i ledger.Intent) ledger.Intent {
		i.LastEvent = string(intent.ResolvedNotApplied)
		return i
	}
	lastEvent := func(e intent.Event, i ledger.Intent) ledger.Intent {
		i.LastEvent = string(e)
		return i
	}
	cases := []struct {
		name   string
		it     ledger.Intent
		latest *ledger.Intent
		want   bool
	}{
		{"no window", ledger.Intent{Key: k, Canonical: `{"window":""}`}, nil, true},
		{"no window member", ledger.Intent{Key: k, Canonical: `{}`}, nil, true},
		{"applied, younger than its window", it("1m0s#0", intent.Applied, 30*time.Second), latest(it("1m0s#0", intent.Applied, 30*time.Second)), true},
		{"applied, older than its window", it("1m0s#0", intent.Applied, 2*time.Minute), latest(it("1m0s#0", intent.Applied, 2*time.Minute)), false},
		{"unknown, older than its window", it("1m0s#3", intent.Unknown, time.Hour), latest(it("1m0s#3", intent.Unknown, time.Hour)), true},
		{"blocked, older than its window", it("1m0s#0", intent.Blocked, 2*time.Minute), latest(it("1m0s#0", intent.Blocked, 2*time.Minute)), false},
		{"resolved not applied by the owner, older than its window", resolvedNotApplied(it("1m0s#0", intent.Blocked, time.Hour)),
			latest(resolvedNotApplied(it("1m0s#0", intent.Blocked, time.Hour))), true},
		{"rejected by the owner, older than its window", lastEvent(intent.HoldRejected, it("1m0s#0", intent.Blocked, time.Hour)),
			latest(lastEvent(intent.HoldRejected, it("1m0s#0", intent.Blocked, time.Hour))), true},
		{"blocked by a gate, older than its window", lastEvent(intent.GatesBlocked, it("1m0s#0", intent.Blocked, 2*time.Minute)),
			latest(lastEvent(intent.GatesBlocked, it("1m0s#0", intent.Blocked, 2*time.Minute))), false},
		{"not the family's newest", it("1m0s#0", intent.Unknown, time.Second), &ledger.Intent{Key: other}, false},
		{"family not read", it("1m0s#0", intent.Unknown, time.Second), nil, false},
		{"a slot key, unresolved", it("1m0s@30000000", intent.Reconciling, time.Hour), latest(it("1m0s@30000000", intent.Reconciling, time.Hour)), true},
		{"no length", it("1m0s", intent.Unknown, 0), latest(it("1m0s", intent.Unknown, 0)), false},
		{"bad length", it("soon#1", intent.Unknown, 0), latest(it("soon#1", intent.Unknown, 0)), false},
		{"bad generation", it("1m0s#x", intent.Unknown, 0), latest(it("1m0s#x", intent.Unknown, 0)), false},
		{"negative generation", it("1m0s#-1", intent.Unknown, 0), latest(it("1m0s#-1", intent.Unknown, 0)), false},
		{"zero length", it("0s#0", intent.Unknown, 0), latest(it("0s#0", intent.Unknown, 0)), false},
		{"not json", ledger.Intent{Key: k, Canonical: `not json`}, nil, false},
	}
	for _, tc := range cases {
		if got := e.windowCurrent(tc.it, tc.latest); got != tc.want {
			t.Errorf("%s: windowCurrent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestIdempotencyWindowIsASpanAfterTheFamilysLastAction: under a
// ten-minute idempotency window for payouts, an identical payout is the
// same action as long as the last one is unresolved or younger than ten
// minutes, and a new one only after. The window used to be a slot of the
// clock counted from the epoch: a payout that timed out (UNKNOWN: it may
// have been paid) a second before a slot's end, sent again a second after
// it, was a new intent with a new idempotency key, allowed while the
// first was unresolved (an attacker's-eye review's finding: one payout
// sent twice).
func TestIdempotencyWindowIsASpanAfterTheFamilysLastAction(t *testing.T) {
	const window = 10 * time.Minute
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Grants = append(m.Grants, &countersignv1.Grant{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, MaxAmountMinor: 1 << 40, Currencies: []string{"USD"}})
		m.Idempotency = []*countersignv1.IdempotencySetting{{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, Window: durationpb.New(window)}}
	})
	// A second before the end of a ten-minute slot of the clock.
	clock := testclock.New(time.Now().Truncate(window).Add(window - time.Second))
	r.e.now = clock.Now
	ctx := context.Background()
	payout := func(amount int) Outcome {
		req := r.refund()
		req.Path, req.Body = "/v1/payouts", fmt.Appendf(nil, "amount=%d&currency=usd&destination=ba_1", amount)
		return r.e.Decide(ctx, req)
	}
	windowOf := func(out Outcome) string {
		t.Helper()
		it, _ := r.attempts(t, out.Intent)
		var k struct {
			Window string `json:"window"`
		}
		if err := json.Unmarshal([]byte(it.Canonical), &k); err != nil {
			t.Fatal(err)
		}
		return k.Window
	}

	// Timed out: ambiguous, and stays so past the slot's end and the
	// window's length.
	first := payout(500000)
	expect(t, first, Allow, ReasonAllowed)
	if w := windowOf(first); w != "10m0s#0" {
		t.Fatalf("the first payout is keyed in window %q, want its family's generation 0", w)
	}
	if it, _, err := r.e.Commit(ctx, *first.Intent, rail.Response{Status: 504}); err != nil || it.State != intent.Unknown {
		t.Fatalf("commit of a 504 = %s, %v", it.State, err)
	}
	for _, after := range []time.Duration{2 * time.Second, window + time.Minute, 4 * window} {
		clock.Set(first.Intent.createdForTest(t, r).Add(after))
		again := payout(500000)
		if again.Verdict == Allow || again.ReasonCode != ReasonReconciling || again.Intent == nil || again.Intent.SIK != first.Intent.SIK {
			t.Fatalf("the same payout %s after the first (UNKNOWN) = %s %s on %v; want it answered as the first, still reconciling",
				after, again.Verdict, again.ReasonCode, again.Intent)
		}
	}

	// Paid: the same payout within the window is the paid one; after it, a
	// new payout, the family's next generation.
	clock.Set(time.Now())
	second := payout(700000)
	expect(t, second, Allow, ReasonAllowed)
	paid := rail.Response{Status: 200, Headers: map[string]string{"content-type": "application/json"},
		Body: []byte(`{"id":"po_1","object":"payout","amount":700000,"currency":"usd","status":"paid","destination":"ba_1"}`)}
	if it, _, err := r.e.Commit(ctx, *second.Intent, paid); err != nil || it.State != intent.Applied {
		t.Fatalf("commit of the payout = %s, %v", it.State, err)
	}
	born := second.Intent.createdForTest(t, r)
	clock.Set(born.Add(window - time.Second))
	if dup := payout(700000); dup.ReasonCode != ReasonDuplicateApplied || dup.Intent == nil || dup.Intent.SIK != second.Intent.SIK {
		t.Fatalf("the same payout within the window = %s %s; want the paid one's duplicate", dup.Verdict, dup.ReasonCode)
	}
	clock.Set(born.Add(window + time.Second))
	next := payout(700000)
	expect(t, next, Allow, ReasonAllowed)
	if next.Intent.SIK == second.Intent.SIK || windowOf(next) != "10m0s#1" {
		t.Fatalf("the same payout after the window is %s in window %q; want a new intent, generation 1", next.Intent.SIK, windowOf(next))
	}
	// Its stamp is new too: the rail is told it is another payout.
	if strings.EqualFold(next.SetHeaders["idempotency-key"], second.SetHeaders["idempotency-key"]) {
		t.Fatalf("the next generation kept the idempotency key %q", next.SetHeaders["idempotency-key"])
	}
}

// createdForTest is when the ledger says ref's intent was born.
func (ref *IntentRef) createdForTest(t *testing.T, r *rig) time.Time {
	t.Helper()
	it, _ := r.attempts(t, ref)
	return it.CreatedAt
}

// TestIdempotencyWindowRunsFromTheFamilysLastEffect: a payout proven absent
// and retried just before its window (counted from its birth) ran out is
// paid then; the identical payout a few seconds later, past the window
// from its birth, is still that payout (its duplicate), not the family's
// next generation with a new idempotency key, which the rail would pay
// again. The intent's birth is moved back in the ledger (the clock the
// database stamps is the real one).
func TestIdempotencyWindowRunsFromTheFamilysLastEffect(t *testing.T) {
	const window = 10 * time.Minute
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Grants = append(m.Grants, &countersignv1.Grant{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, MaxAmountMinor: 1 << 40, Currencies: []string{"USD"}})
		m.Idempotency = []*countersignv1.IdempotencySetting{{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, Window: durationpb.New(window)}}
	})
	ctx := context.Background()
	payout := func() Outcome {
		req := r.refund()
		req.Path, req.Body = "/v1/payouts", []byte("amount=500000&currency=usd&destination=ba_1")
		return r.e.Decide(ctx, req)
	}
	first := payout()
	expect(t, first, Allow, ReasonAllowed)
	sent, err := r.e.MarkSent(ctx, *first.Intent, true)
	if err != nil {
		t.Fatal(err)
	}
	if it, _, err := r.e.Commit(ctx, sent, rail.Response{Status: 504}); err != nil || it.State != intent.Unknown {
		t.Fatalf("commit of a 504 = %s, %v", it.State, err)
	}
	key := ledger.Key{RailAccount: first.Intent.RailAccount, SIK: first.Intent.SIK}
	if _, err := r.store.ClaimReconcile(ctx, "rec", time.Minute, 10, &key); err != nil {
		t.Fatal(err)
	}
	if it, err := r.store.RecordFinding(ctx, ledger.Finding{Key: key, AttemptSeq: 1, Outcome: ledger.FindingAbsent, Pages: 1, PaginationExhausted: true, Owner: "rec"}); err != nil || it.State != intent.ConfirmedNotApplied {
		t.Fatalf("finding = %s, %v", it.State, err)
	}
	// Born nearly a window ago.
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil { // past the immutability trigger
		t.Fatal(err)
	}
	var born time.Time
	if err := conn.QueryRow(ctx, `UPDATE intents SET created_at = now() - $2::bigint * interval '1 microsecond' WHERE sik = $1 RETURNING created_at`,
		key.SIK, (window - 3*time.Second).Microseconds()).Scan(&born); err != nil {
		t.Fatal(err)
	}

	retry := payout()
	if retry.Verdict != Allow || retry.Intent.SIK != first.Intent.SIK {
		t.Fatalf("the retry after proven absence = %s %s on %v; want the same intent", retry.Verdict, retry.ReasonCode, retry.Intent)
	}
	paid := rail.Response{Status: 200, Headers: map[string]string{"content-type": "application/json"},
		Body: []byte(`{"id":"po_1","object":"payout","amount":500000,"currency":"usd","status":"paid","destination":"ba_1"}`)}
	if it, _, err := r.e.Commit(ctx, *retry.Intent, paid); err != nil || it.State != intent.Applied {
		t.Fatalf("commit of the retry = %s, %v", it.State, err)
	}
	if !wait.Until(20*time.Second, func() bool { return time.Since(born) > window+100*time.Millisecond }) {
		t.Fatal("the window from the payout's birth did not pass")
	}
	dup := payout()
	if dup.Verdict == Allow || dup.ReasonCode != ReasonDuplicateApplied || dup.Intent == nil || dup.Intent.SIK != first.Intent.SIK {
		t.Fatalf("the identical payout seconds after the paid one = %s %s on %v; want the paid one's duplicate", dup.Verdict, dup.ReasonCode, dup.Intent)
	}
}
