package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/countersign/countersign/internal/intent"
)

// Write is the writes of one decision, queued in order and sent by Apply as
// one pipelined implicit transaction: one client round trip, all or
// nothing, and no lock held while Go waits. Its primitives queue typed
// statements; what they return is filled in when Apply succeeds.
//
// The decision was made on facts read before (ReadForDecision). The
// Assert… primitives re-check, in the transaction, what the gates relied
// on. AssertPrincipal and AssertMandate share-lock (decisions never wait
// for each other on them) and go first; the counts' assertions go last,
// after LockMandateLineage and before the budget hold, so that the lock that
// makes decisions take turns is held only while PostgreSQL runs the end of
// the batch and commits.
//
// The leading assertions (those queued before anything else: who asks, the
// mandate, the request unseen, the rows relied on present) are one statement,
// the batch's first, which also pins synchronous_commit: they read nothing
// another statement of the batch writes, and each is a statement's worth
// of work PostgreSQL would otherwise start and end on every decision.
type Write struct {
	b       pgx.Batch
	started bool     // the first statement is queued
	lead    []string // leading assertions: SELECT-list items, parameters numbered after leadArgs
	leadArg []any
	// rows, when set, are the rows its store knows exist; made and relied
	// name the rows this Write creates and the ones it counts on.
	rows         *knownRows
	made, relied []string
}

// NewWrite starts a decision's writes. Like InTx, the transaction commits
// with synchronous_commit on whatever the server's default (I2).
func NewWrite() *Write { return &Write{} }

// NewWrite is NewWrite relying on the rows this store saw committed that
// are never deleted (a mandate's budget rows): it does not
// insert them again, and asserts what it relies on (if one is missing
// after all, Apply refuses with a *GuardError and the store forgets it).
func (s *Store) NewWrite() *Write { return &Write{rows: s.rows} }

// knownRows is a set of row names; only ever added to, but for a row a
// Write found missing.
type knownRows struct{ m sync.Map }

func budgetRowName(hash, currency string) string { return "budget/" + hash + "/" + currency }

// known says whether w may rely on the row named n, noting that it does.
func (w *Write) known(n string) bool {
	if w.rows == nil {
		return false
	}
	if _, ok := w.rows.m.Load(n); !ok {
		w.made = append(w.made, n)
		return false
	}
	w.relied = append(w.relied, n)
	return true
}

// settled records what w's Apply taught: the rows it made exist; the rows
// it relied on are forgotten when it failed (one may be missing).
func (w *Write) settled(err error) {
	if w.rows == nil {
		return
	}
	if err == nil {
		for _, n := range w.made {
			w.rows.m.Store(n, struct{}{})
		}
		return
	}
	for _, n := range w.relied {
		w.rows.m.Delete(n)
	}
}

// queue queues a statement after the first one.
func (w *Write) queue(sql string, args ...any) *pgx.QueuedQuery {
	w.start()
	return w.b.Queue(sql, args...)
}

// start queues the first statement: synchronous_commit, then the leading
// assertions in the order they were made.
func (w *Write) start() {
	if w.started {
		return
	}
	w.started = true
	w.b.Queue(`SELECT `+strings.Join(append([]string{`set_config('synchronous_commit', 'on', true)`}, w.lead...), ", "), w.leadArg...)
}

// assert asserts cond (a boolean SQL expression with parameters $1…$n for
// args), refusing with what. Made before anything else is queued, it joins
// the first statement; after, it is a statement of its own. what is a
// constant of this package.
func (w *Write) assert(cond, what string, args ...any) {
	w.lock(`countersign_assert(`+cond+`, '`+what+`')`, args...)
}

// lock adds a leading item (a lock or an assertion: a SELECT-list item
// with parameters $1…$n for args):
// in the first statement, before the assertions after it, when nothing
// else is queued yet; else a statement of its own.
func (w *Write) lock(item string, args ...any) {
	if w.started {
		w.b.Queue(`SELECT `+item, args...)
		return
	}
	w.lead = append(w.lead, renumber(item, len(w.leadArg)))
	w.leadArg = append(w.leadArg, args...)
}

var paramRE = regexp.MustCompile(`\$([0-9]+)`)

// renumber shifts the parameters $1…$n of sql by offset.
func renumber(sql string, offset int) string {
	if offset == 0 {
		return sql
	}
	return paramRE.ReplaceAllStringFunc(sql, func(p string) string {
		n, _ := strconv.Atoi(p[1:]) // the pattern matched digits only
		return "$" + strconv.Itoa(n+offset)
	})
}

// NewIntent is an intent to create.
type NewIntent struct {
	Key
	Rail           string
	Action         string
	Subject        string
	AmountMinor    int64
	Currency       string
	Payee          string
	DistinctReason string
	Canonical      string
	AgentID        string
	// Family is, for an action under an idempotency window, the alias of
	// the request (the same for every identical request); "" otherwise.
	// FamilyLatest finds the family's newest intent.
	Family string
}

// firstAttempt is the path of a new intent whose gates passed.
var firstAttempt = []intent.Event{intent.GatesPassed, intent.AttemptStarted}

// ErrIntentExists means NewIntent met an intent with the same key: the
// Write did nothing, and the existing intent must be decided on as it is.
var ErrIntentExists = errors.New("ledger: the intent already exists")

// GuardError means an Assert… of a Write no longer held at commit: the
// Write did nothing. What names the fact.
type GuardError struct{ What string }

func (e *GuardError) Error() string { return "ledger: what the decision relied on changed: " + e.What }

// Moved reports whether the write was refused because who asks or the
// mandate it relied on moved (a revocation, a newer mandate:
// AssertPrincipal, AssertMandate and their Check forms), not a count.
func (e *GuardError) Moved() bool {
	return strings.HasSuffix(e.What, guardPrincipal) || strings.HasSuffix(e.What, guardMandate)
}

// The assertions' messages that Moved recognises.
const (
	guardPrincipal = `the credential or its agent was revoked or expired`
	guardMandate   = `the mandate was revoked or replaced`
)

// NewIntent creates p's intent and moves it along path (from PROPOSED),
// each edge checked in Go and by the trigger, each audited; reason is the
// last edge's. The returned intent is as it will be after the last edge.
func (w *Write) NewIntent(p NewIntent, reason string, path ...intent.Event) (*Intent, error) {
	out := &Intent{Key: p.Key, State: intent.Proposed, Rail: p.Rail, Action: p.Action, Subject: p.Subject,
		AmountMinor: p.AmountMinor, Currency: p.Currency, Payee: p.Payee, DistinctReason: p.DistinctReason,
		Canonical: p.Canonical, AgentID: p.AgentID}
	if slices.Equal(path, firstAttempt) && reason == "" {
		// Born at the end of its first path, one row version instead of
		// three, with one audit record of its birth ('' → IN_FLIGHT by
		// ATTEMPT_STARTED): no transaction can see it PROPOSED or
		// AUTHORIZED, and that path is the only one (migration 00020).
		w.queue(`
			INSERT INTO intents (rail_account, sik, state, last_event, attempt_count, rail, action, subject, amount_minor,
			                     currency, payee, distinct_reason, canonical, agent_id`+familyColumn(p)+`)
			VALUES ($1, $2, 'IN_FLIGHT', 'ATTEMPT_STARTED', 1, $3, $4, $5, $6, $7, $8, $9, $10, NULLIF($11, '')`+familyValue(p, 12)+`)
			RETURNING `+intentColumns,
			newIntentArgs(p)...).QueryRow(scanInto(out))
		out.State, out.LastEvent, out.AttemptCount = intent.InFlight, string(intent.AttemptStarted), 1
		return out, nil
	}
	w.queue(`
		INSERT INTO intents (rail_account, sik, state, last_event, rail, action, subject, amount_minor,
		                     currency, payee, distinct_reason, canonical, agent_id`+familyColumn(p)+`)
		VALUES ($1, $2, 'PROPOSED', 'PROPOSED', $3, $4, $5, $6, $7, $8, $9, $10, NULLIF($11, '')`+familyValue(p, 12)+`)
		RETURNING `+intentColumns,
		newIntentArgs(p)...).QueryRow(scanInto(out))
	it := *out
	for i, ev := range path {
		o := transitionOpts{}
		if i == len(path)-1 {
			o.reason = reason
		}
		sql, args, err := transitionStatement(it, ev, o)
		if err != nil {
			return nil, err
		}
		it.State, _ = intent.Transition(it.State, ev)
		it.LastEvent, it.Reason = string(ev), o.reason
		if intent.StartsAttempt(ev) {
			it.AttemptCount++
		}
		w.queue(sql, args...).QueryRow(scanInto(out))
	}
	*out = it
	return out, nil
}

// familyColumn, familyValue and newIntentArgs write a new intent's family
// only when it has one, so that an intent without one is written the same
// on a ledger migrated before families (00030).
func familyColumn(p NewIntent) string {
	if p.Family == "" {
		return ""
	}
	return ", family"
}

func familyValue(p NewIntent, n int) string {
	if p.Family == "" {
		return ""
	}
	return fmt.Sprintf(", $%d", n)
}

func newIntentArgs(p NewIntent) []any {
	args := []any{p.RailAccount, p.SIK, p.Rail, p.Action, p.Subject, p.AmountMinor, p.Currency, p.Payee,
		p.DistinctReason, p.Canonical, p.AgentID}
	if p.Family != "" {
		args = append(args, p.Family)
	}
	return args
}

func scanInto(dst *Intent) func(pgx.Row) error {
	return func(row pgx.Row) error {
		it, err := scanIntent(row)
		if err != nil {
			return err
		}
		*dst = it
		return nil
	}
}

// AttemptStart is the durable attempt an ALLOW starts.
type AttemptStart struct {
	Key
	Seq             int
	Stamp           string
	StampGeneration uint32
	LeaseOwner      string
	LeaseTTL        time.Duration
	Request         HTTPMessage
	ViaEnvoy        bool
	CommitTokenHash []byte
	// CommitAgent is the agent the commit token is issued to: the only
	// caller that may report the attempt's answer.
	CommitAgent string
	// MayApplyFor is how long after its request leaves the rail may still
	// apply it. An attempt that leaves without ext_proc's mark (not
	// ViaEnvoy) may leave until its lease ends, so the rail may apply it
	// until the lease's end plus MayApplyFor; one through ext_proc gets its
	// time when MarkSent lets it leave.
	MayApplyFor time.Duration
}

// StartAttempt writes the IN_FLIGHT attempt (the intent's AttemptStarted
// edge is NewIntent's). The returned attempt is complete after Apply.
func (w *Write) StartAttempt(s AttemptStart) (*Attempt, error) {
	headers, err := json.Marshal(s.Request.Headers)
	if err != nil {
		return nil, err
	}
	ttl := s.LeaseTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	a := &Attempt{Key: s.Key, Seq: s.Seq, Stamp: s.Stamp, StampGeneration: s.StampGeneration, Outcome: "pending",
		LeaseOwner: s.LeaseOwner, Request: s.Request, ViaEnvoy: s.ViaEnvoy}
	sql, args := insertAttempt(*a, ttl, headers, s)
	w.queue(sql, args...).QueryRow(func(row pgx.Row) error {
		return row.Scan(&a.LeaseExpiresAt, &a.StartedAt)
	})
	return a, nil
}

// AddAlias records that a request with alias resolved to k. The write was
// decided on the alias being unseen: if another decision recorded it
// since, Apply fails with ErrIntentExists and writes nothing (a plain
// INSERT, not ON CONFLICT: no speculative insertion to log on every ALLOW).
func (w *Write) AddAlias(k Key, alias string) {
	w.queue(`INSERT INTO intent_aliases (rail_account, alias, sik) VALUES ($1, $2, $3)`, k.RailAccount, alias, k.SIK)
}

// RecordDecision writes the decision; *id is its row after Apply.
func (w *Write) RecordDecision(d Decision) (*int64, error) {
	args, err := decisionArgs(d)
	if err != nil {
		return nil, err
	}
	id := new(int64)
	w.queue(insertDecisionSQL, args...).QueryRow(func(row pgx.Row) error { return row.Scan(id) })
	return id, nil
}

// OpenApproval opens the pending approval of a new HELD intent; with
// v.MaxPending, only while the agent has fewer pending (the agent's
// openings take turns, so the bound is exact): else Apply refuses with a
// *GuardError, and the locking path (Tx.OpenApproval) says why.
func (w *Write) OpenApproval(it Intent, v ApprovalSpec) error {
	args, err := approvalArgs(it, v)
	if err != nil {
		return err
	}
	if v.MaxPending > 0 {
		w.queue(lockAgentApprovalsSQL, v.agent(it))
		w.queue(`SELECT countersign_assert((`+pendingApprovalsSQL+`) < $2, 'the agent has too many approvals pending')`, v.agent(it), v.MaxPending)
	}
	w.queue(openApprovalSQL, args...)
	return nil
}

// AssertPrincipal share-locks the credential and its agent and asserts both
// are still live: a revocation (an UPDATE of either row) waits for this
// decision, and a decision after it sees it.
//
// It first takes the agent's revocation lock in shared mode
// (agentLockShared): a revocation waiting for it makes every later
// decision of the agent queue behind it, so an agent's stream of
// decisions can never keep its owner's revocation waiting.
func (w *Write) AssertPrincipal(credentialID, agentID string) {
	w.lock(agentLockShared, agentID)
	w.assert(`(SELECT count(*) = 1 FROM (
		SELECT 1 FROM credentials c JOIN agents a ON a.id = c.agent_id
		WHERE c.id = $1 AND c.revoked_at IS NULL AND c.expires_at > now() AND a.status = 'active'
		FOR SHARE OF c, a) live)`, guardPrincipal, credentialID)
}

// AssertMandate share-locks the agent's active mandate on railAccount and
// asserts it is still hash: not revoked, its account still held by its
// owner, and not superseded by a newer one.
func (w *Write) AssertMandate(agentID, railAccount, hash string, at time.Time) {
	w.assert(`(SELECT count(*) = 1 AND bool_and(hash = $3) FROM (
		SELECT hash FROM mandates m
		WHERE agent_id = $1 AND rail_account = $2 AND revoked_at IS NULL
		  AND valid_from <= $4 AND $4 < valid_until AND `+heldByOwner+`
		ORDER BY created_at DESC, hash LIMIT 1 FOR SHARE) active)`, guardMandate, agentID, railAccount, hash, at)
}

// CheckPrincipal asserts, without a lock, that the credential and its
// agent are still live: for a decision that moves no money (a refusal),
// made on facts remembered from an earlier decision rather than read now.
// A revocation committed before this transaction's statement is seen.
func (w *Write) CheckPrincipal(credentialID string) {
	w.assert(`EXISTS (
		SELECT 1 FROM credentials c JOIN agents a ON a.id = c.agent_id
		WHERE c.id = $1 AND c.revoked_at IS NULL AND c.expires_at > now() AND a.status = 'active')`,
		guardPrincipal, credentialID)
}

// CheckMandate is AssertMandate without the lock, for the same decisions
// as CheckPrincipal.
func (w *Write) CheckMandate(agentID, railAccount, hash string, at time.Time) {
	w.assert(`(SELECT count(*) = 1 AND bool_and(hash = $3) FROM (
		SELECT hash FROM mandates m
		WHERE agent_id = $1 AND rail_account = $2 AND revoked_at IS NULL
		  AND valid_from <= $4 AND $4 < valid_until AND `+heldByOwner+`
		ORDER BY created_at DESC, hash LIMIT 1) active)`, guardMandate, agentID, railAccount, hash, at)
}

// AssertNoAlias asserts the request alias names no intent yet: a decision
// made without reading it (on remembered facts) is one of a request not
// seen before, or it is not made.
func (w *Write) AssertNoAlias(railAccount, alias string) {
	w.assert(`NOT EXISTS (SELECT 1 FROM intent_aliases WHERE rail_account = $1 AND alias = $2)`, `the request was seen before`, railAccount, alias)
}

// LockMandateLineage serialises, from here to the commit, the decisions of
// one mandate's lineage (the mandates of its agent on its rail account,
// whose windows count each other's holds; B1): what the assertions after it
// count cannot change until this transaction ends.
func (w *Write) LockMandateLineage(hash string) {
	w.queue(`SELECT countersign_assert(`+lockLineageSQL+`, 'the mandate is not in the ledger')`, hash)
}

// AssertWindow asserts that the mandate's holds of key (an agent, or a
// payee when byPayee) in the window starting at since (WindowUsage's
// count) number at most maxCalls and sum, in currency, to at most
// maxAmount.
func (w *Write) AssertWindow(hash string, byPayee bool, key string, since time.Time, currency string, maxCalls, maxAmount int64, what string) {
	w.queue(`SELECT countersign_assert(calls <= $6 AND amount_minor <= $7, $8) FROM `+windowUsageSQL,
		hash, byPayee, key, since, currency, maxCalls, maxAmount, what)
}

// AssertSubjectActions asserts the mandate holds at most max actions on
// subject.
func (w *Write) AssertSubjectActions(hash, subject string, maxActions int64) {
	w.queue(`SELECT countersign_assert(count(*) <= $3, 'the recurrence limit has no room left')
		FROM budget_holds WHERE mandate_hash = $1 AND subject = $2 AND state <> 'voided'`, hash, subject, maxActions)
}

// AssertFeeSpent asserts the fees reported on the mandate's actions are at
// most maxFee.
func (w *Write) AssertFeeSpent(hash string, maxFee int64) {
	w.queue(`SELECT countersign_assert(COALESCE((SELECT sum(fee_minor) FROM mandate_fee_spent WHERE mandate_hash = $1), 0) <= $2,
		'the fee budget is exhausted')`, hash, maxFee)
}

// LockSubject serialises, to the commit, the decisions of refunds of one
// payment (whatever their mandates): the outstanding amount asserted after
// it counts every other refund of the subject that committed before.
func (w *Write) LockSubject(railAccount, subject string) {
	w.queue(lockSubjectSQL, railAccount, subject)
}

// lockSubjectSQL takes a transaction-scoped advisory lock named for the
// subject (no row, no WAL; released at commit, so it holds behind a
// transaction pooler too).
const lockSubjectSQL = `SELECT pg_advisory_xact_lock(hashtextextended('countersign.subject/' || $1 || '/' || $2, 0))`

// AssertOutstanding asserts the other intents on subject that a rail read
// begun at readAt may not show (Outstanding) sum to at most maxMinor.
func (w *Write) AssertOutstanding(railAccount, subject, except string, maxMinor int64, readAt time.Time) {
	w.queue(`SELECT countersign_assert(COALESCE(sum(amount_minor), 0) <= $4, 'more of the subject is being refunded than the rail showed')
		FROM intents WHERE rail_account = $1 AND subject = $2 AND sik <> $3 AND `+outstandingState(5),
		railAccount, subject, except, maxMinor, sinceRead{readAt})
}

// AssertBudget asserts the mandate's held and spent amounts in currency sum
// to at most maxUsed (for a decision that places no hold, whose room the
// budget row's CHECK does not check).
func (w *Write) AssertBudget(hash, currency string, maxUsed int64) {
	w.queue(`SELECT countersign_assert(COALESCE((SELECT reserved_minor FROM mandate_budgets
		WHERE mandate_hash = $1 AND currency = $2), 0) <= $3, 'the budget has no room left')`, hash, currency, maxUsed)
}

// PlaceHold reserves an allowed intent's amount under its mandate; the
// budget row's CHECK refuses an overrun (B1).
func (w *Write) PlaceHold(it Intent, h HoldSpec) {
	if h.BudgetMinor > 0 && !w.known(budgetRowName(h.MandateHash, h.Currency)) {
		w.queue(budgetRowSQL, h.MandateHash, h.Currency, h.BudgetMinor)
	}
	w.queue(insertHoldSQL, holdArgs(it, h)...)
}

// Apply sends w as one transaction. It returns ErrIntentExists when its
// NewIntent met an existing intent, a *GuardError when an assertion or the
// budget's CHECK refused, ErrUnavailable when the ledger cannot be reached;
// a serialization failure or deadlock sends it again.
func (s *Store) Apply(ctx context.Context, w *Write) error {
	return s.apply(ctx, OpDecisionBatch, w)
}

// apply is Apply reporting its transaction to the observer as op.
func (s *Store) apply(ctx context.Context, op string, w *Write) (err error) {
	start := time.Now()
	defer func() { w.settled(err); s.observed(op, start, err) }()
	w.start()
	for attempt := 1; ; attempt++ {
		// A batch of its own each attempt: pgx keeps on each queued query
		// the statement it prepared, which a failed batch may have dropped
		// (a retried deadlock then failed as "prepared statement does not
		// exist", and the decision was denied).
		b := &pgx.Batch{}
		for _, q := range w.b.QueuedQueries {
			b.QueuedQueries = append(b.QueuedQueries, &pgx.QueuedQuery{SQL: q.SQL, Arguments: q.Arguments, Fn: q.Fn})
		}
		err := s.pool.SendBatch(ctx, b).Close()
		if err == nil {
			return nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			switch {
			case pgErr.Code == "23505" && (pgErr.TableName == "intents" || pgErr.TableName == "intent_aliases"):
				return ErrIntentExists
			case pgErr.Code == "CSG01":
				return &GuardError{What: pgErr.Message}
			case pgErr.Code == "23514" && pgErr.ConstraintName == "budget_never_exceeded":
				return &GuardError{What: "the budget has no room left"}
			case pgErr.Code == "23514" && pgErr.ConstraintName == "" && strings.HasPrefix(pgErr.Message, "no budget row for mandate") && len(w.relied) > 0:
				// A budget row relied on is missing (countersign_hold_guard).
				return &GuardError{What: pgErr.Message}
			}
		}
		if !retryable(err) || attempt >= maxTxAttempts {
			return classify(fmt.Errorf("ledger: apply decision: %w", err))
		}
		backoff := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 6))) //nolint:gosec // jitter needs no secrecy
		select {
		case <-ctx.Done():
			return classify(errors.Join(err, ctx.Err()))
		case <-time.After(backoff):
		}
	}
}
