package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// UsageQuery names what to count against one mandate for the owner API,
// with the limits gate's own counts (Tx.WindowUsage, Tx.BudgetUsage,
// Tx.FeeSpent), so that what an owner is shown is what the gate enforces.
type UsageQuery struct {
	Hash string
	// Currencies are the mandate's budget currencies.
	Currencies []string
	// Windows are the windows to count. A payee window (ByPayee) with an
	// empty Key stands for every payee key something counts against since
	// Since: it is counted once per such key, at most MaxPayeeKeys of them.
	Windows      []WindowQuery
	MaxPayeeKeys int
	// Fee reads the fees reported on the mandate's applied actions.
	Fee bool
}

// WindowQuery is one sliding window's count: the holds of Key (the agent,
// or a payee key when ByPayee) under the mandate or another of its agent's
// on its rail account (its lineage, migration 00036) still held, or posted
// at or after Since (countersign_window_usage, migration 00019);
// AmountMinor counts Currency only ("" counts calls only).
type WindowQuery struct {
	// Index is the caller's (the window's index in the mandate).
	Index    int
	ByPayee  bool
	Key      string
	Since    time.Time
	Currency string
}

// WindowCount is a window's count now.
type WindowCount struct {
	WindowQuery
	Calls, AmountMinor int64
	// FirstPosted is the earliest settled_at of the posted holds counted:
	// the first to leave the window, at FirstPosted + its duration. Nil
	// when nothing counts or every hold counted is still held (in flight
	// or unknown: it leaves a window's length after its answer).
	FirstPosted *time.Time
}

// BudgetCount is one budget's held and spent amounts (0 when no hold
// was ever placed under it: its row is written with the first).
type BudgetCount struct {
	Currency    string
	Held, Spent int64
}

// UsageCounts is what a UsageQuery counted, in one snapshot.
type UsageCounts struct {
	Budgets []BudgetCount
	Windows []WindowCount
	// Truncated: a payee window had more keys than MaxPayeeKeys.
	Truncated bool
	FeeSpent  int64
}

// MandateUsage counts q in one read-only snapshot (repeatable read), so
// its figures are those of one moment: of the decisions committed before
// it, all, and of the others, none.
func (s *Store) MandateUsage(ctx context.Context, q UsageQuery) (UsageCounts, error) {
	var out UsageCounts
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(ptx pgx.Tx) error {
		out = UsageCounts{}
		tx := &Tx{tx: ptx}
		for _, c := range q.Currencies {
			held, spent, err := tx.BudgetUsage(ctx, q.Hash, c)
			if err != nil {
				return err
			}
			out.Budgets = append(out.Budgets, BudgetCount{Currency: c, Held: held, Spent: spent})
		}
		for _, w := range q.Windows {
			queries := []WindowQuery{w}
			if w.ByPayee && w.Key == "" {
				keys, more, err := tx.windowPayeeKeys(ctx, q.Hash, w.Since, q.MaxPayeeKeys)
				if err != nil {
					return err
				}
				out.Truncated = out.Truncated || more
				queries = queries[:0]
				for _, k := range keys {
					wk := w
					wk.Key = k
					queries = append(queries, wk)
				}
			}
			for _, wq := range queries {
				c, err := tx.windowCount(ctx, q.Hash, wq)
				if err != nil {
					return err
				}
				// A key listed from its minute's counter may have only
				// holds before Since in that minute: nothing counts then.
				if c.Calls == 0 && w.Key == "" {
					continue
				}
				out.Windows = append(out.Windows, c)
			}
		}
		if q.Fee {
			fee, err := tx.FeeSpent(ctx, q.Hash)
			if err != nil {
				return err
			}
			out.FeeSpent = fee
		}
		return nil
	})
	if err != nil {
		return UsageCounts{}, classify(fmt.Errorf("ledger: mandate usage: %w", err))
	}
	return out, nil
}

// windowCount is WindowUsage and the answer time of the first posted hold
// it counts.
func (tx *Tx) windowCount(ctx context.Context, hash string, w WindowQuery) (WindowCount, error) {
	c := WindowCount{WindowQuery: w}
	var err error
	if c.Calls, c.AmountMinor, err = tx.WindowUsage(ctx, hash, w.ByPayee, w.Key, w.Since, w.Currency); err != nil {
		return c, err
	}
	if c.Calls == 0 {
		return c, nil
	}
	// The posted holds countersign_window_usage counts (of the key,
	// settled at or after since), through the same partial indexes.
	// Each names its scope, as the indexes' predicates do (00022).
	q := `SELECT min(settled_at) FROM budget_holds WHERE mandate_hash = ANY (countersign_mandate_lineage($1)) AND agent_id = $2
		AND state = 'posted' AND window_agent AND settled_at >= $3`
	if w.ByPayee {
		q = `SELECT min(settled_at) FROM budget_holds WHERE mandate_hash = ANY (countersign_mandate_lineage($1)) AND payee_key = $2
			AND state = 'posted' AND window_payee AND settled_at >= $3`
	}
	err = tx.tx.QueryRow(ctx, q, hash, w.Key, w.Since).Scan(&c.FirstPosted)
	return c, err
}

// windowPayeeKeys lists, in order, the payee keys of a mandate's lineage whose
// per-minute counters have holds in the minute of since or later (the
// minutes a window starting at since sums); more says there were more
// than limit.
func (tx *Tx) windowPayeeKeys(ctx context.Context, hash string, since time.Time, limit int) (keys []string, more bool, err error) {
	rows, err := tx.tx.Query(ctx, `SELECT DISTINCT key FROM window_buckets
		WHERE mandate_hash = ANY (countersign_mandate_lineage($1)) AND by_payee AND bucket >= countersign_window_bucket($2) AND calls > 0
		ORDER BY key LIMIT $3`, hash, since, limit+1)
	if err != nil {
		return nil, false, err
	}
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, false, err
	}
	if len(keys) > limit {
		return keys[:limit], true, nil
	}
	return keys, false, nil
}
