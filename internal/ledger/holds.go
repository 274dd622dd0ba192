package ledger

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// HoldSpec is a budget hold to place with the attempt.
type HoldSpec struct {
	MandateHash string
	AgentID     string
	// PayeeKey is what per-payee windows count by (the payee, or the
	// subject for refunds).
	PayeeKey    string
	Currency    string
	AmountMinor int64
	// BudgetMinor is the mandate's total budget in Currency; 0 means the
	// currency has no budget (only windows and grants limit it).
	BudgetMinor int64
	// NoAgentWindow and NoPayeeWindow say the mandate has no sliding
	// window of that scope: the hold is then not added to that scope's
	// per-minute counters (window_buckets), whose rows decisions under a
	// mandate of grants alone would otherwise take turns on. A mandate
	// never changes, so all of its holds agree.
	NoAgentWindow bool
	NoPayeeWindow bool
}

// LatestMandate returns the newest mandate of agentID on railAccount,
// revoked or expired included (the scope gate names why it no longer
// applies), with a share lock so a concurrent revocation waits for this
// decision. ErrNotFound when the agent has none.
func (tx *Tx) LatestMandate(ctx context.Context, agentID, railAccount string, at time.Time) (MandateRecord, error) {
	return latestMandate(ctx, tx.tx, agentID, railAccount, at, " FOR SHARE")
}

// LatestMandate is Tx.LatestMandate outside a transaction, without a lock:
// for the scope check that precedes an answer from the ledger.
func (s *Store) LatestMandate(ctx context.Context, agentID, railAccount string, at time.Time) (MandateRecord, error) {
	return latestMandate(ctx, s.pool, agentID, railAccount, at, "")
}

func latestMandate(ctx context.Context, q querier, agentID, railAccount string, at time.Time, lock string) (MandateRecord, error) {
	// An active one first; else the newest, whatever its state.
	r, err := activeMandate(ctx, q, agentID, railAccount, at, lock)
	if err == nil || !errors.Is(err, ErrNotFound) {
		return r, err
	}
	// Only mandates on an account their owner holds: one the owner lost
	// must not come back here as "the newest, unrevoked".
	r, err = scanMandate(q.QueryRow(ctx, `SELECT `+mandateColumns+` FROM mandates m
		WHERE agent_id = $1 AND rail_account = $2 AND `+heldByOwner+`
		ORDER BY created_at DESC, hash LIMIT 1`+lock, agentID, railAccount))
	if errors.Is(err, pgx.ErrNoRows) {
		return MandateRecord{}, fmt.Errorf("%w: mandate for agent %s on %s", ErrNotFound, agentID, railAccount)
	}
	return r, classify(err)
}

// LockMandateLineage serialises the deciding transactions of one mandate
// and of every other mandate of its agent on its rail account (its
// lineage, whose windows count each other's holds: migration 00036): the
// usage read after it cannot change until this transaction ends (B1).
func (tx *Tx) LockMandateLineage(ctx context.Context, hash string) error {
	var held bool
	if err := tx.tx.QueryRow(ctx, `SELECT `+lockLineageSQL, hash).Scan(&held); err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("%w: mandate %s", ErrNotFound, hash)
	}
	return nil
}

// lockLineageSQL takes the lock of the mandate $1's lineage; it is true
// when the mandate is in the ledger.
const lockLineageSQL = `countersign_lock_lineage($1)`

// WindowUsage counts the holds of a mandate's lineage (the mandates of its
// agent on its rail account) in a window starting at since: the
// held ones (in flight or unknown) always, the posted ones whose answer was
// recorded at or after since (migration 00019), for one agent (byPayee
// false) or one payee key (byPayee true), in currency for the amount (""
// counts the calls only).
func (tx *Tx) WindowUsage(ctx context.Context, hash string, byPayee bool, key string, since time.Time, currency string) (calls, amount int64, err error) {
	err = tx.tx.QueryRow(ctx, `SELECT calls, amount_minor FROM `+windowUsageSQL,
		hash, byPayee, key, since, currency).Scan(&calls, &amount)
	return calls, amount, err
}

// windowUsageSQL is the one count of a sliding window, for WindowUsage and
// Write.AssertWindow: countersign_window_usage (migration 00014) sums the
// window's whole minutes from their counters and counts only the holds of
// the minute since falls in, so its cost does not grow with the window.
const windowUsageSQL = `countersign_window_usage($1, $2, $3, $4, $5)`

// BudgetUsage reads the held and spent amounts of a mandate's budget.
func (tx *Tx) BudgetUsage(ctx context.Context, hash, currency string) (held, spent int64, err error) {
	err = tx.tx.QueryRow(ctx, `SELECT `+budgetHeldSpent+` FROM `+budgetRows+` WHERE b.mandate_hash = $1 AND b.currency = $2`,
		hash, currency).Scan(&held, &spent)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, nil
	}
	return held, spent, err
}

// FeeSpent sums the fees the rail reported on the mandate's applied actions.
func (tx *Tx) FeeSpent(ctx context.Context, hash string) (int64, error) {
	var fee int64
	err := tx.tx.QueryRow(ctx, `SELECT COALESCE(sum(fee_minor), 0)::bigint FROM mandate_fee_spent WHERE mandate_hash = $1`, hash).Scan(&fee)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return fee, err
}

// SubjectActions counts the mandate's held or posted actions on a subject.
func (tx *Tx) SubjectActions(ctx context.Context, hash, subject string) (int64, error) {
	var n int64
	err := tx.tx.QueryRow(ctx, `SELECT count(*) FROM budget_holds WHERE mandate_hash = $1 AND subject = $2 AND state <> 'voided'`,
		hash, subject).Scan(&n)
	return n, err
}

// LockSubject is Write.LockSubject in the transaction.
func (tx *Tx) LockSubject(ctx context.Context, railAccount, subject string) error {
	_, err := tx.tx.Exec(ctx, lockSubjectSQL, railAccount, subject)
	return err
}

// Outstanding sums the amounts of the intents on a subject that the rail's
// refundable balance may not show yet: in flight or of unknown outcome.
func (tx *Tx) Outstanding(ctx context.Context, railAccount, subject, except string, readAt time.Time) (int64, error) {
	var n int64
	err := tx.tx.QueryRow(ctx, `SELECT COALESCE(sum(amount_minor), 0) FROM intents
		WHERE rail_account = $1 AND subject = $2 AND sik <> $3 AND `+outstandingState(4),
		railAccount, subject, except, sinceRead{readAt}).Scan(&n)
	return n, err
}

// outstandingState is the condition on a subject's intents that a rail
// read begun the parameter $arg (a sinceRead) microseconds before the
// transaction began may not show: those the rail may still be applying (IN_FLIGHT, UNKNOWN,
// RECONCILING, and QUARANTINED until a person resolves it: its answer did
// not say what the rail did, found by a review), and those recorded
// APPLIED since the read began. An
// intent's move to APPLIED is written (updated_at: its transaction's
// start) only after the rail answered, so one applied after the read was
// answered is recorded after the read began; before, it was counted
// nowhere, and a second refund whose read came just before the first one
// applied was allowed on the whole payment (found by a review: 500 + 600
// of a 1000 payment). The read's start is a duration back from the
// database's own clock, never a time from this process's: no skew between
// the two clocks enters.
//
// A refund the read missed was applied at the rail after the rail answered
// the read, and recorded after its own answer came back: a rail round
// trip, at least, after the read began. A refund recorded APPLIED less
// than sinceReadMargin before the read began is counted twice, which can
// only refuse.
func outstandingState(arg int) string {
	return fmt.Sprintf(`(state IN ('IN_FLIGHT', 'UNKNOWN', 'RECONCILING', 'QUARANTINED')
		OR (state = 'APPLIED' AND updated_at >= now() - $%d::bigint * interval '1 microsecond'))`, arg)
}

// sinceReadMargin is added to a sinceRead for the time its statement takes
// to reach the database once encoded: half a round trip (the statement's
// transaction begins then, and now() is that time).
const sinceReadMargin = time.Millisecond

// sinceRead is how long before now a rail read began at (this process's
// monotonic clock), in microseconds, plus sinceReadMargin: a duration, so
// the database measures it back from its own clock and no skew between the
// two clocks enters. It is taken as the statement is encoded (a fresh
// write's batch is encoded once it has a connection, after any wait for
// one), not when the statement was queued: a refund recorded APPLIED
// while the write waited is counted (a duration taken at queueing missed
// it).
type sinceRead struct{ at time.Time }

// Value implements driver.Valuer.
func (s sinceRead) Value() (driver.Value, error) {
	return (time.Since(s.at) + sinceReadMargin).Microseconds(), nil
}

// PayeePaidBefore reports whether anything on railAccount was ever applied
// to payee.
func (tx *Tx) PayeePaidBefore(ctx context.Context, railAccount, payee string) (bool, error) {
	var ok bool
	err := tx.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM intents WHERE rail_account = $1 AND payee = $2 AND state = 'APPLIED')`,
		railAccount, payee).Scan(&ok)
	return ok, err
}

// PlaceHold reserves the amount of an allowed intent under its mandate. The budget row's CHECK refuses an overrun even if the gates were
// wrong.
func (tx *Tx) PlaceHold(ctx context.Context, it Intent, h HoldSpec) error {
	if h.BudgetMinor > 0 {
		if _, err := tx.tx.Exec(ctx, budgetRowSQL, h.MandateHash, h.Currency, h.BudgetMinor); err != nil {
			return err
		}
	}
	_, err := tx.tx.Exec(ctx, insertHoldSQL, holdArgs(it, h)...)
	return err
}

// budgetRows and budgetHeldSpent read a budget's held and spent amounts:
// its row keeps what is reserved (held and posted), and what is spent is
// counted apart, over a few rows (migration 00025), so held is the one less
// the sum of the others, read in one statement.
const (
	budgetRows = `mandate_budgets b CROSS JOIN LATERAL (SELECT COALESCE(sum(spent_minor), 0)::bigint AS spent_minor FROM mandate_budget_spent
		WHERE mandate_hash = b.mandate_hash AND currency = b.currency) s`
	budgetHeldSpent = `b.reserved_minor - s.spent_minor, s.spent_minor`
)

const budgetRowSQL = `INSERT INTO mandate_budgets (mandate_hash, currency, budget_minor) VALUES ($1, $2, $3)
			ON CONFLICT (mandate_hash, currency) DO NOTHING`

const insertHoldSQL = `
		INSERT INTO budget_holds (rail_account, sik, hold_seq, mandate_hash, agent_id, payee_key, subject, currency, amount_minor, budgeted,
		                          window_agent, window_payee)
		VALUES ($1, $2, (SELECT COALESCE(max(hold_seq), 0) + 1 FROM budget_holds WHERE rail_account = $1 AND sik = $2),
		        $3, $4, $5, $6, $7, $8, $9, $10, $11)`

func holdArgs(it Intent, h HoldSpec) []any {
	return []any{it.RailAccount, it.SIK, h.MandateHash, h.AgentID, h.PayeeKey, it.Subject, h.Currency, h.AmountMinor, h.BudgetMinor > 0,
		!h.NoAgentWindow, !h.NoPayeeWindow}
}

// BudgetState is one budget row, for checks and the owner API.
type BudgetState struct {
	Currency            string
	Budget, Held, Spent int64
}

// Budgets lists a mandate's budget rows.
func (s *Store) Budgets(ctx context.Context, hash string) ([]BudgetState, error) {
	rows, err := s.pool.Query(ctx, `SELECT b.currency, b.budget_minor, `+budgetHeldSpent+` FROM `+budgetRows+`
		WHERE b.mandate_hash = $1 ORDER BY b.currency`, hash)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (BudgetState, error) {
		var b BudgetState
		err := r.Scan(&b.Currency, &b.Budget, &b.Held, &b.Spent)
		return b, err
	})
	return out, classify(err)
}
