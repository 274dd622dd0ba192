package ledger

import (
	"context"
	"fmt"
	"time"
)

// What the ledger may forget. Nothing here is a record of money: budget
// holds, intents, attempts, decisions and audit records are kept for good.
const (
	// WindowBucketRetention is how long a window's minute counter of
	// posted holds is kept after its minute: the longest window a mandate
	// may name (31 days, the bound on Window.duration in
	// proto/countersign/v1/mandate.proto) and a day for a deciding
	// process whose clock runs behind the database's. A window starts
	// where its process's clock says, so no window can start before a
	// counter this old, and a posted hold never moves again (it settles
	// once), so nothing writes to it either.
	WindowBucketRetention = 32 * 24 * time.Hour
	// OwnerSessionRetention is how long an owner session is kept after it
	// expired: an expired session authenticates nobody; a day keeps it
	// findable while a skewed replica could still be asked about it.
	OwnerSessionRetention = 24 * time.Hour
)

// Pruned counts the rows one Prune deleted.
type Pruned struct {
	WindowBuckets int64
	OwnerSessions int64
}

// Prune deletes the minute counters no window can count any more and the
// owner sessions long expired, by the database's clock. The open counter
// of held holds ('infinity') is never pruned. Every replica may prune at
// once: each deletes what the others have not.
func (s *Store) Prune(ctx context.Context) (Pruned, error) {
	var p Pruned
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM window_buckets
		WHERE bucket < now() - make_interval(secs => $1) AND bucket <> timestamptz 'infinity'`,
		WindowBucketRetention.Seconds())
	if err != nil {
		return p, classify(fmt.Errorf("ledger: prune window counters: %w", err))
	}
	p.WindowBuckets = tag.RowsAffected()
	tag, err = s.pool.Exec(ctx, `DELETE FROM owner_sessions WHERE expires_at < now() - make_interval(secs => $1)`,
		OwnerSessionRetention.Seconds())
	if err != nil {
		return p, classify(fmt.Errorf("ledger: prune owner sessions: %w", err))
	}
	p.OwnerSessions = tag.RowsAffected()
	return p, nil
}
