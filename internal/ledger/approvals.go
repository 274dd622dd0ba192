package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/intent"
)

// Approval is an owner's decision on one HELD request, with the request it
// covers as its intent records it.
type Approval struct {
	ID string
	Key
	OwnerID     string
	AgentID     string
	MandateHash string
	Fingerprint string
	Gates       []GateRecord
	State       string // pending, approved, rejected, expired, used, void
	Note        string
	CreatedAt   time.Time
	ExpiresAt   time.Time
	DecidedAt   *time.Time

	// The held intent's action. Canonical is the exact canonical request
	// whose SHA-256 is Fingerprint; the other fields repeat its values.
	Rail        string
	Action      string
	Subject     string
	AmountMinor int64
	Currency    string
	Payee       string
	Canonical   string
	// Labels is the canonical JSON (RFC 8785) of the held request's label
	// members, "{}" for none: the approval covers these exact labels.
	Labels string
}

// Fingerprint is the request fingerprint an approval is bound to: the
// SHA-256 of the intent's canonical action.
func Fingerprint(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return hex.EncodeToString(sum[:])
}

// ErrApprovalState means the approval cannot make the asked move (already
// decided, expired, used).
var ErrApprovalState = errors.New("ledger: the approval can no longer be decided")

// approvalFrom joins each approval to its intent: the intent row holds the
// canonical request the approval's fingerprint was taken over.
const approvalFrom = ` FROM approvals ap JOIN intents i ON i.rail_account = ap.rail_account AND i.sik = ap.sik `

const approvalColumns = `ap.id, ap.rail_account, ap.sik, ap.owner_id, ap.agent_id, ap.mandate_hash, ap.fingerprint, ap.gates, ap.state, ap.note,
	ap.created_at, ap.expires_at, ap.decided_at, i.rail, i.action, i.subject, i.amount_minor, i.currency, i.payee, i.canonical, ap.labels`

// effectiveState is an approval's state as its owner reads it: one whose
// time ran out is expired even before a decision marks it so (the mark is
// written lazily, when its intent is decided again), so an owner listing
// pending approvals never sees one that can no longer be decided.
const effectiveState = `CASE WHEN ap.state IN ('pending', 'approved') AND ap.expires_at <= now() THEN 'expired' ELSE ap.state END`

// ownerApprovalColumns are approvalColumns with the effective state.
var ownerApprovalColumns = strings.Replace(approvalColumns, "ap.state,", effectiveState+",", 1)

// scanApproval scans approvalColumns, then any extra columns into extra.
func scanApproval(row pgx.Row, extra ...any) (Approval, error) {
	var a Approval
	var gates []byte
	err := row.Scan(append([]any{&a.ID, &a.RailAccount, &a.SIK, &a.OwnerID, &a.AgentID, &a.MandateHash, &a.Fingerprint, &gates,
		&a.State, &a.Note, &a.CreatedAt, &a.ExpiresAt, &a.DecidedAt,
		&a.Rail, &a.Action, &a.Subject, &a.AmountMinor, &a.Currency, &a.Payee, &a.Canonical, &a.Labels}, extra...)...)
	if err == nil && len(gates) > 0 {
		err = json.Unmarshal(gates, &a.Gates)
	}
	return a, err
}

// ApprovalSpec is the approval a HOLD opens.
type ApprovalSpec struct {
	// AgentID is the agent whose request is held: the one asking, which
	// may be another agent of the owner than the intent's creator (a
	// sibling sending the identical request). It is the approval's agent,
	// the only one that may use it; "" is the intent's creator.
	AgentID     string
	MandateHash string
	// TTL is how long the owner has to decide (0: a day).
	TTL   time.Duration
	Gates []GateRecord
	// Labels is the canonical JSON of the held request's labels ("" is
	// none, "{}").
	Labels string
	// MaxPending, when above 0, bounds the agent's approvals pending at
	// once: opening one more fails with ErrTooManyPendingApprovals.
	MaxPending int
}

// MaxReplacedApprovals is how many times an intent's live approval may be
// replaced by one of another request (other labels, another mandate):
// each replacement keeps the voided row, and an agent re-sending one held
// request with fresh metadata at its decision rate stored a row of up to
// its body's size each time, forever (found by a review).
const MaxReplacedApprovals = 8

// ErrApprovalReplacedTooOften means opening the approval would replace
// the intent's live one after MaxReplacedApprovals replacements: nothing
// was written, and the live approval stays as it was.
var ErrApprovalReplacedTooOften = errors.New("ledger: the intent's approval was replaced too often")

// ErrTooManyPendingApprovals means an approval would open while the
// agent already has ApprovalSpec.MaxPending pending.
var ErrTooManyPendingApprovals = errors.New("ledger: the agent has too many approvals pending")

// lockAgentApprovalsSQL makes the openings of one agent's approvals take
// turns (a transaction-scoped advisory lock: no row, no WAL), so that the
// count after it is exact.
const lockAgentApprovalsSQL = `SELECT pg_advisory_xact_lock(hashtextextended('countersign.approvals/' || $1, 0))`

// pendingApprovalsSQL counts an agent's approvals still waiting for a
// decision (one whose time ran out is not waiting, even unmarked).
const pendingApprovalsSQL = `SELECT count(*) FROM approvals WHERE agent_id = $1 AND state = 'pending' AND expires_at > now()`

// OpenApproval creates the pending approval of a HELD intent: it keeps a
// live one that covers the same labels under the same mandate, and reopens
// an expired one. A live one (pending or approved) for other labels is
// voided first: the request changed, so it is a new HOLD with its own
// approval (DESIGN §5), and at most one approval per intent is live. So is
// one opened under another mandate: the request is held under the mandate
// now in force, and its owner decides under that mandate's limits, usage
// and approval lifetime.
func (tx *Tx) OpenApproval(ctx context.Context, it Intent, v ApprovalSpec) error {
	args, err := approvalArgs(it, v)
	if err != nil {
		return err
	}
	// relabelled: the live approval voided was of other labels (not only
	// of another mandate, which the owner's replacing it causes).
	var relabelled bool
	switch err := tx.tx.QueryRow(ctx, supersedeApprovalSQL, it.RailAccount, it.SIK, args[len(args)-1], v.agent(it), v.MandateHash).Scan(&relabelled); {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return err
	}
	if relabelled {
		// Counted for this agent alone: another agent's replacements on
		// the same intent are not its own (found by a review).
		var voided int
		if err := tx.tx.QueryRow(ctx, `SELECT count(*) FROM approvals WHERE rail_account = $1 AND sik = $2 AND state = 'void' AND agent_id = $3`,
			it.RailAccount, it.SIK, v.agent(it)).Scan(&voided); err != nil {
			return err
		}
		if voided > MaxReplacedApprovals {
			return fmt.Errorf("%w (%d)", ErrApprovalReplacedTooOften, voided-1)
		}
	}
	if _, err := tx.tx.Exec(ctx, expireLapsedSQL, v.agent(it)); err != nil {
		return err
	}
	if v.MaxPending > 0 {
		if _, err := tx.tx.Exec(ctx, lockAgentApprovalsSQL, v.agent(it)); err != nil {
			return err
		}
		var kept bool
		var pending int
		if err := tx.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM approvals WHERE rail_account = $1 AND sik = $2 AND state IN ('pending', 'approved')),
			(`+renumber(pendingApprovalsSQL, 2)+`)`, it.RailAccount, it.SIK, v.agent(it)).Scan(&kept, &pending); err != nil {
			return err
		}
		if !kept && pending >= v.MaxPending {
			// The live approval it keeps is no new one; anything else opens one.
			return fmt.Errorf("%w (%d)", ErrTooManyPendingApprovals, pending)
		}
	}
	_, err = tx.tx.Exec(ctx, openApprovalSQL, args...)
	return err
}

// expireLapsedSQL marks the agent's pending approvals whose time ran out
// expired. Nothing else would: a pending approval is marked so only when
// its intent is decided again (LiveApproval), which an agent that never
// sends its held requests again never asks for. They stayed stored
// pending for good, an agent could pile up --max-pending-approvals of them
// every approval lifetime, and the owner's approval stream read them
// among its live ones (found by a review).
//
// Rows another transaction holds (a decision of the same agent that locked
// its own intent's approval) are skipped, not waited for: that decision
// marks its own, and two such decisions no longer wait on each other's
// rows (found by a review).
const expireLapsedSQL = `UPDATE approvals SET state = 'expired' WHERE id IN (
		SELECT id FROM approvals WHERE agent_id = $1 AND state = 'pending' AND expires_at <= now()
		FOR UPDATE SKIP LOCKED)`

// supersedeApprovalSQL voids the requesting agent's live approval of the
// intent for other labels ($3) or under another mandate ($5): its changed
// request, or its request under the mandate that replaced the approval's,
// needs its own. Kept, the old one would take the new one's place (one
// live approval per intent), with the old mandate's lifetime. Another
// agent's approval is not its to void (a sibling's labelled request would
// otherwise void an approval the owner gave, and take its place).
const supersedeApprovalSQL = `UPDATE approvals SET state = 'void'
		WHERE rail_account = $1 AND sik = $2 AND state IN ('pending', 'approved') AND (labels <> $3 OR mandate_hash <> $5) AND agent_id = $4
		RETURNING labels <> $3`

const openApprovalSQL = `
		INSERT INTO approvals (id, rail_account, sik, owner_id, agent_id, mandate_hash, fingerprint, gates, expires_at, labels)
		SELECT $1, $2, $3, a.owner_id, a.id, $5, $6, $7, now() + $8::bigint * interval '1 microsecond', $9
		FROM agents a WHERE a.id = $4
		ON CONFLICT (rail_account, sik) WHERE state IN ('pending', 'approved') DO NOTHING`

func approvalArgs(it Intent, v ApprovalSpec) ([]any, error) {
	id, err := credential.NewID("apr")
	if err != nil {
		return nil, err
	}
	ttl := v.TTL
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	gates, err := json.Marshal(v.Gates)
	if err != nil {
		return nil, err
	}
	labels := v.Labels
	if labels == "" {
		labels = "{}"
	}
	return []any{id, it.RailAccount, it.SIK, v.agent(it), v.MandateHash, Fingerprint(it.Canonical), gates, ttl.Microseconds(), labels}, nil
}

// agent is the agent whose request the approval holds.
func (v ApprovalSpec) agent(it Intent) string {
	if v.AgentID != "" {
		return v.AgentID
	}
	return it.AgentID
}

// LiveApprovalAgent returns the agent of the intent's pending or approved
// approval, its time run out or not; found is false when there is none.
// Unlike LiveApproval it changes nothing.
func (tx *Tx) LiveApprovalAgent(ctx context.Context, k Key) (agent string, found bool, err error) {
	err = tx.tx.QueryRow(ctx, `SELECT agent_id FROM approvals WHERE rail_account = $1 AND sik = $2 AND state IN ('pending', 'approved')`,
		k.RailAccount, k.SIK).Scan(&agent)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return agent, true, nil
}

// LiveApproval returns the pending or approved approval of an intent;
// found is false when there is none. One whose time has run out (by the
// database's clock) is marked expired: a pending one is then not found,
// and an approved one is returned with State "expired", so that the
// gates can tell the agent its approval expired rather than that none
// was ever given.
func (tx *Tx) LiveApproval(ctx context.Context, k Key) (Approval, bool, error) {
	var lapsed bool
	a, err := scanApproval(tx.tx.QueryRow(ctx, `SELECT `+approvalColumns+`, ap.expires_at <= now()`+approvalFrom+`
		WHERE ap.rail_account = $1 AND ap.sik = $2 AND ap.state IN ('pending', 'approved') FOR UPDATE OF ap`, k.RailAccount, k.SIK), &lapsed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Approval{}, false, nil
	case err != nil:
		return Approval{}, false, err
	case !lapsed:
		return a, true, nil
	}
	if _, err := tx.tx.Exec(ctx, `UPDATE approvals SET state = 'expired' WHERE id = $1`, a.ID); err != nil {
		return Approval{}, false, err
	}
	wasApproved := a.State == "approved"
	a.State = "expired"
	return a, wasApproved, nil
}

// SettleApproval moves an intent's approval from one state to another
// (approved → used when its request passes, → void when it is blocked).
func (tx *Tx) SettleApproval(ctx context.Context, k Key, from, to string) error {
	_, err := tx.tx.Exec(ctx, `UPDATE approvals SET state = $4 WHERE rail_account = $1 AND sik = $2 AND state = $3`,
		k.RailAccount, k.SIK, from, to)
	return err
}

// VoidApprovals voids the intent's approvals that can still be decided or
// used (pending or approved): the intent left HELD without them (sent
// under another of its agent's credentials, whose mandate needs no
// approval, or blocked when re-checked), so none may stay in the owner's
// queue as though its request waited.
func (tx *Tx) VoidApprovals(ctx context.Context, k Key) error {
	_, err := tx.tx.Exec(ctx, `UPDATE approvals SET state = 'void' WHERE rail_account = $1 AND sik = $2 AND state IN ('pending', 'approved')`,
		k.RailAccount, k.SIK)
	return err
}

// ListApprovals pages through an owner's approvals (state "" for all).
func (s *Store) ListApprovals(ctx context.Context, ownerID, state, agentID, after string, limit int) ([]Approval, error) {
	// The stored state narrows the scan (approvals_owner); the effective
	// state decides.
	rows, err := s.pool.Query(ctx, `SELECT `+ownerApprovalColumns+approvalFrom+`
		WHERE ap.owner_id = $1 AND ($2 = '' OR `+effectiveState+` = $2)
		  AND ($2 NOT IN ('pending', 'approved') OR ap.state = $2)
		  AND ($3 = '' OR ap.agent_id = $3) AND ap.id > $4
		ORDER BY ap.id LIMIT $5`, ownerID, state, agentID, after, limit)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Approval, error) { return scanApproval(r) })
	return out, classify(err)
}

// LiveApprovals returns up to limit of an owner's approvals stored as
// pending or approved whose time has not run out (the ones that can still
// change), optionally of one agent, by id. One whose time ran out leaves
// the set: a watcher reads it once more on its own (GetApproval: effective
// state expired). Kept in the set, lapsed approvals filled the limit and
// hid new ones (found by a review).
func (s *Store) LiveApprovals(ctx context.Context, ownerID, agentID string, limit int) ([]Approval, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+ownerApprovalColumns+approvalFrom+`
		WHERE ap.owner_id = $1 AND ap.state IN ('pending', 'approved') AND ap.expires_at > now() AND ($2 = '' OR ap.agent_id = $2)
		ORDER BY ap.id LIMIT $3`, ownerID, agentID, limit)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Approval, error) { return scanApproval(r) })
	return out, classify(err)
}

// GetApproval returns one of an owner's approvals.
func (s *Store) GetApproval(ctx context.Context, ownerID, id string) (Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+ownerApprovalColumns+approvalFrom+`WHERE ap.owner_id = $1 AND ap.id = $2`, ownerID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Approval{}, fmt.Errorf("%w: approval %s", ErrNotFound, id)
	}
	return a, classify(err)
}

// Approve approves a pending, unexpired approval of ownerID. When
// fingerprint is given it must be the approval's: the owner approves the
// request they reviewed. The approval is used when the identical request
// passes the gates again; it never widens the mandate.
func (s *Store) Approve(ctx context.Context, ownerID, id, fingerprint, note string) (Approval, error) {
	return s.decideApproval(ctx, ownerID, id, fingerprint, note, "approved")
}

// Reject rejects a pending approval; its intent is BLOCKED for good.
func (s *Store) Reject(ctx context.Context, ownerID, id, note string) (Approval, error) {
	return s.decideApproval(ctx, ownerID, id, "", note, "rejected")
}

func (s *Store) decideApproval(ctx context.Context, ownerID, id, fingerprint, note, to string) (Approval, error) {
	var out Approval
	err := s.inTx(ctx, OpApprovalDecide, func(tx *Tx) error {
		a, err := scanApproval(tx.tx.QueryRow(ctx, `SELECT `+approvalColumns+approvalFrom+`WHERE ap.owner_id = $1 AND ap.id = $2 FOR UPDATE OF ap`, ownerID, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: approval %s", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		if why := notDecidable(a, time.Now()); why != "" {
			return fmt.Errorf("%w: %s", ErrApprovalState, why)
		}
		if fingerprint != "" && fingerprint != a.Fingerprint {
			return fmt.Errorf("%w: approval %s is for request %s, not %s", ErrApprovalState, id, a.Fingerprint, fingerprint)
		}
		// Only a request that still waits may be decided: a held intent,
		// or a retry held in place. One sent, or blocked, without this
		// approval is not decided by it (its approvals are voided then; an
		// approval left from before that is refused here). Read without a
		// lock: what moves the intent voids the approval under the row
		// lock this transaction holds.
		var state intent.State
		if err := tx.tx.QueryRow(ctx, `SELECT state FROM intents WHERE rail_account = $1 AND sik = $2`, a.Key.RailAccount, a.Key.SIK).Scan(&state); err != nil {
			return err
		}
		switch state {
		case intent.Held, intent.FailedTerminal, intent.ConfirmedNotApplied:
		default:
			return fmt.Errorf("%w: approval %s can no longer be decided: its intent %s is %s, so its request was sent or settled without it", ErrApprovalState, id, a.Key, state)
		}
		if _, err := tx.tx.Exec(ctx, `UPDATE approvals SET state = $2, note = $3 WHERE id = $1`, id, to, note); err != nil {
			return err
		}
		if to == "rejected" {
			it, err := tx.lockIntent(ctx, a.Key)
			if err != nil {
				return err
			}
			// A held intent, or a retry of one proven not applied that was
			// held in place (engine: the retry's approval): rejected, it
			// ends BLOCKED, so the identical request is refused for good
			// instead of opening a new approval.
			switch it.State {
			case intent.Held, intent.FailedTerminal, intent.ConfirmedNotApplied:
				if _, err := tx.transition(ctx, it, intent.HoldRejected, transitionOpts{reason: "rejected by the owner: " + note}); err != nil {
					return err
				}
			}
		}
		out, err = scanApproval(tx.tx.QueryRow(ctx, `SELECT `+approvalColumns+approvalFrom+`WHERE ap.id = $1`, id))
		return err
	})
	return out, classify(err)
}

// notDecidable says precisely why approval a can no longer be approved or
// rejected at now, or "" when it can: expired, already used, rejected,
// voided, or already approved.
func notDecidable(a Approval, now time.Time) string {
	at := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return " at " + t.UTC().Format(time.RFC3339)
	}
	expires := a.ExpiresAt.UTC().Format(time.RFC3339)
	switch a.State {
	case "pending":
		if now.Before(a.ExpiresAt) {
			return ""
		}
		return fmt.Sprintf("approval %s expired at %s before it was decided; the agent's identical request will open a new approval", a.ID, expires)
	case "approved":
		return fmt.Sprintf("approval %s was already approved%s; the identical request may use it once, until %s", a.ID, at(a.DecidedAt), expires)
	case "used":
		return fmt.Sprintf("approval %s was approved%s and already used by the request it covers; an approval is used once, so a new request needs a new approval", a.ID, at(a.DecidedAt))
	case "rejected":
		return fmt.Sprintf("approval %s was rejected%s; its request is blocked for good", a.ID, at(a.DecidedAt))
	case "expired":
		// decided_at is when it left pending: before the expiry only when
		// the owner approved it (an expiry is recorded at or after it).
		if a.DecidedAt != nil && a.DecidedAt.Before(a.ExpiresAt) {
			return fmt.Sprintf("approval %s was approved%s but expired at %s before its request used it; the agent's identical request will open a new approval", a.ID, at(a.DecidedAt), expires)
		}
		return fmt.Sprintf("approval %s expired at %s before it was decided; the agent's identical request will open a new approval", a.ID, expires)
	case "void":
		return fmt.Sprintf("approval %s was voided: its agent or mandate was revoked, its request was blocked when re-checked against the mandate, "+
			"its request was sent without it (by another credential of its agent, under a mandate that needs no approval), "+
			"the agent changed the request's labels (a new approval covers the changed request), "+
			"or a newer mandate replaced the one it was opened under (the request is held again under the new one); it can no longer be decided", a.ID)
	}
	return fmt.Sprintf("approval %s is %s", a.ID, a.State)
}
