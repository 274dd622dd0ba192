package ledger

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// TestPruneForgetsWhatNoWindowCounts: Prune deletes a minute counter older
// than the retention and an owner session expired for longer than its
// own, and nothing else: not a counter a 31-day window starting now counts,
// not one inside the day of margin, not the open counter of a held hold,
// not the counter of a hold posted now, not a session expired an hour ago
// or still live. A 31-day window counts the same after it.
func TestPruneForgetsWhatNoWindowCounts(t *testing.T) {
	f := newWindowFixture(t)
	ctx := context.Background()
	mandate := fmt.Sprintf("%064x", 41)
	hold := testHold{Mandate: mandate, Agent: "agent_a", Payee: "acct_p1", Currency: "USD", Amount: 100, At: time.Now()}
	posted, err := f.insert(ctx, hold)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.settle(ctx, posted, "posted"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.insert(ctx, hold); err != nil { // stays held: the open counter
		t.Fatal(err)
	}
	// Counters of holds posted long ago (a hold's answer cannot be written
	// in the past, so they are written as the triggers would have).
	day := 24 * time.Hour
	ages := map[string]time.Duration{
		"in a 31-day window":      31*day - time.Hour,
		"in the margin":           WindowBucketRetention - time.Hour,
		"past the retention":      WindowBucketRetention + 2*time.Minute,
		"long past the retention": 400 * day,
	}
	for what, age := range ages {
		if _, err := f.s.pool.Exec(ctx, `
			INSERT INTO window_buckets (mandate_hash, by_payee, key, bucket, currency, shard, calls, amount_minor)
			VALUES ($1, false, 'agent_a', countersign_window_bucket(now() - make_interval(secs => $2)), 'USD', 0, 3, 300)`,
			mandate, age.Seconds()); err != nil {
			t.Fatalf("counter %s: %v", what, err)
		}
	}
	q := windowQuery{Mandate: mandate, Key: "agent_a", Since: time.Now().Add(-31 * day), Currency: "USD"}
	calls, amount, err := f.usage(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 5 || amount != 500 {
		t.Fatalf("a 31-day window counts %d calls, %d before pruning; want 5, 500 (posted, held, 3 a month ago)", calls, amount)
	}

	sessions := map[string]time.Duration{ // id → how long ago it expired (negative: live)
		"oss_expiredlongago":  2 * day,
		"oss_expiredrecently": time.Hour,
		"oss_stilllive":       -time.Hour,
	}
	for id, ago := range sessions {
		hash := sha256.Sum256([]byte(id))
		if _, err := f.s.pool.Exec(ctx, `
			INSERT INTO owner_sessions (id, secret_hash, owner_id, subject, method, created_at, expires_at)
			VALUES ($1, $2, 'owner_1', 'oidc-subject', 'oidc', now() - make_interval(secs => $3) - interval '8 hours', now() - make_interval(secs => $3))`,
			id, hash[:], ago.Seconds()); err != nil {
			t.Fatalf("session %s: %v", id, err)
		}
	}

	p, err := f.s.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p != (Pruned{WindowBuckets: 2, OwnerSessions: 1}) {
		t.Fatalf("Prune = %+v, want 2 window counters (past the retention) and 1 session (expired two days ago)", p)
	}
	for what, age := range ages {
		var n int
		if err := f.s.pool.QueryRow(ctx, `SELECT count(*) FROM window_buckets
			WHERE mandate_hash = $1 AND bucket = countersign_window_bucket(now() - make_interval(secs => $2))`,
			mandate, age.Seconds()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if want := age < WindowBucketRetention; (n == 1) != want {
			t.Errorf("counter %s (%s old): %d rows left, want kept=%v", what, age, n, want)
		}
	}
	for id, ago := range sessions {
		var n int
		if err := f.s.pool.QueryRow(ctx, `SELECT count(*) FROM owner_sessions WHERE id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if want := ago < OwnerSessionRetention; (n == 1) != want {
			t.Errorf("session %s (expired %s ago): %d rows left, want kept=%v", id, ago, n, want)
		}
	}
	if c, a, err := f.usage(ctx, q); err != nil || c != calls || a != amount {
		t.Fatalf("a 31-day window counts %d calls, %d after pruning (err %v); want %d, %d as before", c, a, err, calls, amount)
	}
	// The counters the triggers keep (the posted hold's minute, the open
	// one) are whole: without the month-old rows written by hand above,
	// they equal the holds row for row.
	if _, err := f.s.pool.Exec(ctx, `DELETE FROM window_buckets WHERE bucket < now() - interval '1 day'`); err != nil {
		t.Fatal(err)
	}
	if err := bucketsMatchHolds(ctx, f.s); err != nil {
		t.Fatal(err)
	}
	if p, err := f.s.Prune(ctx); err != nil || p != (Pruned{}) {
		t.Fatalf("a second Prune = %+v, %v; want nothing left to delete", p, err)
	}
}

// TestWindowRetentionCoversTheLongestWindow ties WindowBucketRetention to
// the bound protovalidate puts on a window's duration: raising that bound
// past the retention (less its day of margin) would let Prune delete
// counters a window still sums.
func TestWindowRetentionCoversTheLongestWindow(t *testing.T) {
	fd := (&countersignv1.Window{}).ProtoReflect().Descriptor().Fields().ByName("duration")
	rules, ok := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
	if !ok || rules.GetDuration().GetLte() == nil {
		t.Fatal("Window.duration has no upper bound in its validation rules: no retention can cover it")
	}
	longest := rules.GetDuration().GetLte().AsDuration()
	if longest+24*time.Hour > WindowBucketRetention {
		t.Fatalf("the longest window is %s; WindowBucketRetention %s must exceed it by a day", longest, WindowBucketRetention)
	}
}
