package engine

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// TestAllowLocksNoRowItUpdates: an ALLOW under a budget and a window
// updates its mandate's budget row and its window bucket and takes no
// tuple lock on either first (migration 00044). A tuple lock is a WAL
// record of its own, written by a BEFORE UPDATE row trigger on the row
// (PostgreSQL locks the row before running one) and by INSERT … ON
// CONFLICT DO UPDATE finding it: read here from the WAL itself with
// pg_walinspect, over the ALLOWs after the first.
func TestAllowLocksNoRowItUpdates(t *testing.T) {
	const n = 30
	r := newRigWithPayments(t, n, func(m *countersignv1.Mandate) {
		m.Budgets = []*countersignv1.Money{{AmountMinor: 1 << 40, Currency: "USD"}}
		m.Windows = []*countersignv1.Window{{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT, Duration: durationpb.New(time.Hour),
			MaxCalls: 1 << 30, MaxAmount: &countersignv1.Money{AmountMinor: 1 << 40, Currency: "USD"}}}
	})
	ctx := context.Background()
	c, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	if _, err := c.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		t.Fatal(err)
	}
	allow := func(i int) {
		req := r.refund()
		req.Body = []byte("payment_intent=pi_" + strconv.Itoa(i) + "&amount=100")
		if out := r.e.Decide(ctx, req); out.Verdict != Allow {
			t.Fatalf("refund %d: %s %s", i, out.ReasonCode, out.Reason)
		}
	}
	allow(0) // the budget row exists from here on
	var from string
	if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&from); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		allow(i)
	}
	var budgets, buckets, locks int
	err = c.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE c.relname = 'mandate_budgets' AND w.record_type IN ('UPDATE', 'HOT_UPDATE')),
		       count(*) FILTER (WHERE c.relname = 'window_buckets' AND w.record_type IN ('UPDATE', 'HOT_UPDATE', 'INSERT')),
		       count(*) FILTER (WHERE w.record_type = 'LOCK')
		FROM pg_get_wal_records_info($1::pg_lsn, pg_current_wal_lsn()) w
		JOIN pg_class c ON w.block_ref LIKE '%/' || pg_relation_filenode(c.oid) || ' fork main %'
		WHERE w.resource_manager = 'Heap' AND c.relname IN ('mandate_budgets', 'window_buckets')`, from).Scan(&budgets, &buckets, &locks)
	if err != nil {
		t.Fatal(err)
	}
	// Each ALLOW updates the budget row, and updates its window bucket
	// or inserts it (a held hold counts in one of 16 shards of the open
	// bucket, made by the first hold that falls in it).
	if budgets != n-1 || buckets != n-1 {
		t.Fatalf("%d ALLOWs wrote %d budget row updates and %d window bucket updates or inserts: the WAL was not read as expected", n-1, budgets, buckets)
	}
	if locks != 0 {
		t.Errorf("%d ALLOWs locked their budget rows and window buckets %d times before updating them", n-1, locks)
	}
}
