package ledger

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMandateUsageCountsAsTheGate: MandateUsage's window figures are the
// gate's own count (WindowUsage) and the direct count of every hold, for
// windows starting before, inside and after a minute's holds; a payee
// window without a key lists exactly the payee keys something counts
// against; the first counted hold to leave is the posted one answered
// first.
func TestMandateUsageCountsAsTheGate(t *testing.T) {
	ctx := context.Background()
	f := newWindowFixture(t)
	const m = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	base := future()
	holds := []testHold{
		{m, "agt_1", "ba_a", "USD", 100, base.Add(10 * time.Second)},
		{m, "agt_1", "ba_a", "USD", 200, base.Add(50 * time.Second)},
		{m, "agt_1", "ba_b", "EUR", 300, base.Add(2 * time.Minute)},
		{m, "agt_1", "ba_c", "USD", 400, base.Add(5 * time.Minute)},
		{m, "agt_2", "ba_a", "USD", 500, base.Add(5 * time.Minute)}, // another agent
	}
	// Each decided an hour before its answer, at the time listed; a
	// window counts a posted hold by its answer.
	for i, h := range holds {
		answered := h.At
		h.At = h.At.Add(-time.Hour)
		seq, err := f.insert(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if i == 3 { // ba_c no longer counts
			err = f.settle(ctx, seq, "voided")
		} else {
			err = f.settleAt(ctx, seq, "posted", answered)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		since     time.Time
		wantPayee []string
	}{
		{"before every hold", base.Add(-time.Hour), []string{"ba_a", "ba_b"}},
		{"inside the first minute", base.Add(30 * time.Second), []string{"ba_a", "ba_b"}},
		{"after the first minute", base.Add(90 * time.Second), []string{"ba_a", "ba_b"}}, // ba_a: agt_2's hold
		{"after the last counted hold", base.Add(3 * time.Minute), []string{"ba_a"}},
		{"after every hold", base.Add(time.Hour), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := UsageQuery{Hash: m, MaxPayeeKeys: 10, Windows: []WindowQuery{
				{Index: 0, Key: "agt_1", Since: tc.since, Currency: "USD"},
				{Index: 1, ByPayee: true, Since: tc.since, Currency: "USD"},
			}}
			got, err := f.s.MandateUsage(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			var payees []string
			for _, w := range got.Windows {
				wq := windowQuery{Mandate: m, ByPayee: w.ByPayee, Key: w.Key, Since: tc.since, Currency: "USD"}
				calls, amount, err := f.direct(ctx, wq)
				if err != nil {
					t.Fatal(err)
				}
				gateCalls, gateAmount, err := f.usage(ctx, wq)
				if err != nil {
					t.Fatal(err)
				}
				if w.Calls != calls || w.AmountMinor != amount || w.Calls != gateCalls || w.AmountMinor != gateAmount {
					t.Errorf("%s: usage %d calls %d, direct %d %d, gate %d %d", wq, w.Calls, w.AmountMinor, calls, amount, gateCalls, gateAmount)
				}
				col := "agent_id"
				if w.ByPayee {
					col = "payee_key"
					payees = append(payees, w.Key)
				}
				var first *time.Time
				if err := f.s.pool.QueryRow(ctx, `SELECT min(settled_at) FROM budget_holds WHERE mandate_hash = $1 AND `+col+
					` = $2 AND settled_at >= $3 AND state = 'posted'`, m, w.Key, tc.since).Scan(&first); err != nil {
					t.Fatal(err)
				}
				if (first == nil) != (w.FirstPosted == nil) || (first != nil && !first.Equal(*w.FirstPosted)) {
					t.Errorf("%s: first posted %v, want %v", wq, w.FirstPosted, first)
				}
			}
			if !slices.Equal(payees, tc.wantPayee) {
				t.Errorf("payee keys = %v, want %v", payees, tc.wantPayee)
			}
		})
	}

	// More payee keys than asked for: truncated, in key order.
	got, err := f.s.MandateUsage(ctx, UsageQuery{Hash: m, MaxPayeeKeys: 1, Windows: []WindowQuery{{ByPayee: true, Since: base.Add(-time.Hour)}}})
	if err != nil || !got.Truncated || len(got.Windows) != 1 || got.Windows[0].Key != "ba_a" {
		t.Fatalf("truncated usage = %+v, %v", got, err)
	}
	// A named key is reported even when nothing counts against it.
	got, err = f.s.MandateUsage(ctx, UsageQuery{Hash: m, Windows: []WindowQuery{{ByPayee: true, Key: "ba_none", Since: base}}})
	if err != nil || len(got.Windows) != 1 || got.Windows[0].Calls != 0 || got.Windows[0].FirstPosted != nil {
		t.Fatalf("usage of an unused key = %+v, %v", got, err)
	}
}

// TestIntentsBySubjectUseTheirIndex: the subject filter of the owner's
// intent listing is served by intents_subject_recent (00016), not a scan of
// every intent.
func TestIntentsBySubjectUseTheirIndex(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	for i := range 3 {
		p := proposal(100 + i)
		p.Subject = fmt.Sprintf("pi_%d", i)
		if _, err := startFirst(ctx, s, p); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The table is tiny: only a plan without sequential scans tells
	// whether an index can serve the filter.
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `RESET enable_seqscan`) //nolint:errcheck // the connection goes back to the test's pool
	rows, err := conn.Query(ctx, `EXPLAIN SELECT `+intentColumns+` FROM intents
		WHERE subject = $1 ORDER BY created_at DESC, rail_account DESC, sik DESC LIMIT 50`, "pi_1")
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "intents_subject_recent") || strings.Contains(p, "Sort") {
		t.Fatalf("the subject listing is not an index scan in order:\n%s", p)
	}
	its, err := s.OwnerIntents(ctx, "nobody", IntentFilter{Subject: "pi_1"}, nil, 50)
	if err != nil || len(its) != 0 {
		t.Fatalf("an owner without agents lists %v, %v", its, err)
	}
}
