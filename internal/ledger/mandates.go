package ledger

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Mandate modes as stored.
const (
	MandateModeApprovalRequired = "approval_required"
	MandateModeBudgeted         = "budgeted"
)

// MandateRecord is a stored mandate. The ledger keeps the canonical bytes
// that were hashed and never interprets them beyond the columns it selects
// on; internal/mandate.FromCanonical turns them back into the proto.
type MandateRecord struct {
	// Hash is the lower-case hex SHA-256 of Canonical: the mandate's identity.
	Hash    string
	OwnerID string
	AgentID string
	// RailAccount, Mode, ValidFrom and ValidUntil repeat the canonical
	// document's own values (the database checks that they do).
	RailAccount string
	Canonical   []byte
	Mode        string // MandateModeApprovalRequired or MandateModeBudgeted
	ValidFrom   time.Time
	ValidUntil  time.Time
	CreatedAt   time.Time
	// RevokedAt is set, once and for good, by RevokeMandate.
	RevokedAt    *time.Time
	RevokeReason string
}

// ActiveAt reports whether the mandate authorizes anything at t: not
// revoked, and t within [ValidFrom, ValidUntil).
func (r MandateRecord) ActiveAt(t time.Time) bool {
	return r.RevokedAt == nil && !t.Before(r.ValidFrom) && t.Before(r.ValidUntil)
}

var mandateHash = regexp.MustCompile(`^[0-9a-f]{64}$`)

const mandateColumns = `hash, owner_id, agent_id, rail_account, canonical, mode, valid_from, valid_until,
	created_at, revoked_at, COALESCE(revoke_reason, '')`

func scanMandate(row pgx.Row) (MandateRecord, error) {
	var r MandateRecord
	var canonical string
	err := row.Scan(&r.Hash, &r.OwnerID, &r.AgentID, &r.RailAccount, &canonical, &r.Mode,
		&r.ValidFrom, &r.ValidUntil, &r.CreatedAt, &r.RevokedAt, &r.RevokeReason)
	if err != nil {
		return MandateRecord{}, err
	}
	r.Canonical = []byte(canonical)
	return r, nil
}

// CreateMandate stores a mandate for an active agent. It is idempotent on
// the hash: storing a mandate that already exists (revoked or not) changes
// nothing and returns created=false. OwnerID may be empty, in which case the
// agent's owner is recorded; when given it must be the agent's owner. An
// unknown, revoked or foreign agent is ErrNotFound; a rail account the
// agent's owner does not hold (GrantRailAccount) is ErrNotHeld.
//
// A new mandate replaces the agent's newest on its account (a mandate
// never changes: tightening a limit is a new one), so it is written as a
// revocation is, after the agent's revocation lock (agentLockExclusive):
// the decisions that began before it, under the mandate it replaces,
// commit first, and the ones after it wait for it and see the new one.
// Without the lock a decision that had asserted the old mandate as the
// newest committed an ALLOW under it after CreateMandate had returned
// (found by a review: 1000 allowed after the owner lowered the maximum to
// 500). The live approvals opened under the mandates it replaces are
// voided in the same transaction (voidSupersededApprovalsSQL).
func (s *Store) CreateMandate(ctx context.Context, m MandateRecord) (created bool, err error) {
	if !mandateHash.MatchString(m.Hash) {
		return false, fmt.Errorf("ledger: create mandate: hash %q is not lower-case hex SHA-256", m.Hash)
	}
	err = s.inTx(ctx, OpMandateCreate, func(tx *Tx) error {
		if _, err := tx.tx.Exec(ctx, `SELECT `+agentLockExclusive, m.AgentID); err != nil {
			return err
		}
		tag, err := tx.tx.Exec(ctx, `
			INSERT INTO mandates (hash, owner_id, agent_id, rail_account, canonical, mode, valid_from, valid_until)
			SELECT $1, a.owner_id, a.id, $4, $5, $6, $7, $8 FROM agents a
			WHERE a.id = $3 AND a.status = 'active' AND ($2 = '' OR a.owner_id = $2)
			ON CONFLICT (hash) DO NOTHING`,
			m.Hash, m.OwnerID, m.AgentID, m.RailAccount, string(m.Canonical), m.Mode, m.ValidFrom, m.ValidUntil)
		if created = err == nil && tag.RowsAffected() == 1; !created {
			return err
		}
		// The approvals opened under the mandates it replaces are void with
		// them, as a revocation voids its mandate's: the owner decided them
		// under the old limits, usage and approval lifetime. The ladder
		// already refuses them (engine: withApproval); voided here, they also
		// leave the owner's queue rather than wait there to be approved for
		// nothing (found by a review).
		_, err = tx.tx.Exec(ctx, voidSupersededApprovalsSQL, m.Hash)
		return err
	})
	if err != nil {
		var nh *NotHeldError
		if errors.As(notHeld(err, m.RailAccount), &nh) {
			return false, nh
		}
		return false, classify(fmt.Errorf("ledger: create mandate: %w", err))
	}
	if created {
		return true, nil
	}
	// Nothing inserted: either the mandate exists or the agent does not
	// qualify.
	existing, err := s.GetMandate(ctx, m.Hash)
	switch {
	case err == nil && (m.OwnerID == "" || existing.OwnerID == m.OwnerID):
		return false, nil
	case err != nil && !errors.Is(err, ErrNotFound):
		return false, err
	}
	if m.OwnerID != "" {
		return false, fmt.Errorf("%w: active agent %s of owner %s", ErrNotFound, m.AgentID, m.OwnerID)
	}
	return false, fmt.Errorf("%w: active agent %s", ErrNotFound, m.AgentID)
}

// GetMandate returns the mandate with hash, revoked or not.
func (s *Store) GetMandate(ctx context.Context, hash string) (MandateRecord, error) {
	r, err := scanMandate(s.pool.QueryRow(ctx, `SELECT `+mandateColumns+` FROM mandates WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return MandateRecord{}, fmt.Errorf("%w: mandate %s", ErrNotFound, hash)
	}
	if err != nil {
		return MandateRecord{}, classify(fmt.Errorf("ledger: get mandate: %w", err))
	}
	return r, nil
}

// ListMandates returns the mandates of an owner and/or an agent (an empty
// filter matches all), newest first, all at once: it is for the operator's
// CLI. The owner API pages with OwnerMandates.
func (s *Store) ListMandates(ctx context.Context, ownerID, agentID string) ([]MandateRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+mandateColumns+` FROM mandates
		WHERE ($1 = '' OR owner_id = $1) AND ($2 = '' OR agent_id = $2)
		ORDER BY created_at DESC, hash`, ownerID, agentID)
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: list mandates: %w", err))
	}
	defer rows.Close()
	var out []MandateRecord
	for rows.Next() {
		r, err := scanMandate(rows)
		if err != nil {
			return nil, classify(fmt.Errorf("ledger: list mandates: %w", err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("ledger: list mandates: %w", err))
	}
	return out, nil
}

// MandateFilter selects among an owner's mandates (OwnerMandates); a zero
// field matches all.
type MandateFilter struct {
	AgentID     string
	RailAccount string
	// Revoked keeps the revoked mandates only (true) or the unrevoked only
	// (false); nil keeps both.
	Revoked *bool
}

// MaxMandatePage bounds how many mandates OwnerMandates reads at once.
const MaxMandatePage = 1001

// OwnerMandates pages through ownerID's mandates that match f, newest
// first (created_at DESC, then hash), reading at most limit rows (1 to
// MaxMandatePage). after is the hash of the last mandate of the previous
// page, "" for the first; a hash that is not one of ownerID's mandates is
// ErrNotFound. The filters and the page bound are applied in SQL, so a
// page costs what it returns, however many mandates the owner has.
func (s *Store) OwnerMandates(ctx context.Context, ownerID string, f MandateFilter, after string, limit int) ([]MandateRecord, error) {
	if ownerID == "" || limit < 1 || limit > MaxMandatePage {
		return nil, fmt.Errorf("ledger: owner mandates: need an owner and a limit of 1 to %d, got %q and %d", MaxMandatePage, ownerID, limit)
	}
	var afterAt any // NULL: from the newest
	if after != "" {
		var at time.Time
		err := s.pool.QueryRow(ctx, `SELECT created_at FROM mandates WHERE hash = $1 AND owner_id = $2`, after, ownerID).Scan(&at)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%w: mandate %s to page after", ErrNotFound, after)
		}
		if err != nil {
			return nil, classify(fmt.Errorf("ledger: owner mandates: %w", err))
		}
		afterAt = at
	}
	revoked := ""
	if f.Revoked != nil {
		revoked = map[bool]string{true: "revoked", false: "active"}[*f.Revoked]
	}
	rows, err := s.pool.Query(ctx, `SELECT `+mandateColumns+` FROM mandates
		WHERE owner_id = $1 AND ($2 = '' OR agent_id = $2) AND ($3 = '' OR rail_account = $3)
		  AND ($4 = '' OR ($4 = 'revoked') = (revoked_at IS NOT NULL))
		  AND ($5::timestamptz IS NULL OR created_at < $5 OR (created_at = $5 AND hash > $6))
		ORDER BY created_at DESC, hash
		LIMIT $7`, ownerID, f.AgentID, f.RailAccount, revoked, afterAt, after, limit)
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: owner mandates: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MandateRecord, error) { return scanMandate(r) })
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: owner mandates: %w", err))
	}
	return out, nil
}

// RevokeMandate revokes a mandate for good, recording why. Revoking an
// already revoked mandate changes nothing (the first reason stays) and
// returns revoked=false. A decision that holds the mandate through
// Tx.ActiveMandate finishes first; once RevokeMandate returns, no new
// decision can see the mandate as active.
func (s *Store) RevokeMandate(ctx context.Context, hash, reason string) (revoked bool, err error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return false, errors.New("ledger: revoke mandate: a reason is required")
	}
	// After the agent's revocation lock (agentLockExclusive): decisions
	// that began before wait for nothing; later ones wait for this.
	err = s.inTx(ctx, OpRevoke, func(tx *Tx) error {
		if _, err := tx.tx.Exec(ctx, `SELECT `+agentLock("pg_advisory_xact_lock", "agent_id")+` FROM mandates WHERE hash = $1`, hash); err != nil {
			return err
		}
		tag, err := tx.tx.Exec(ctx, `
			UPDATE mandates SET revoked_at = now(), revoke_reason = $2
			WHERE hash = $1 AND revoked_at IS NULL`, hash, reason)
		if revoked = err == nil && tag.RowsAffected() == 1; !revoked {
			return err
		}
		// Its approvals are void with it, in the same transaction: voided
		// after the commit (the owner API did so in a second statement; the
		// operator's CLI not at all), an approval given under it could be
		// used in between, or for good, under another mandate in force on
		// the account (found by a review).
		_, err = tx.tx.Exec(ctx, voidMandateApprovalsSQL, hash)
		return err
	})
	if err != nil {
		return false, classify(fmt.Errorf("ledger: revoke mandate: %w", err))
	}
	if revoked {
		return true, nil
	}
	if _, err := s.GetMandate(ctx, hash); err != nil {
		return false, err
	}
	return false, nil
}

// voidApprovalsUnderSQL voids the live approvals given under the mandates
// the SQL that follows it selects (by mandate_hash).
const voidApprovalsUnderSQL = `UPDATE approvals SET state = 'void' WHERE state IN ('pending', 'approved') AND mandate_hash `

// voidMandateApprovalsSQL voids the live approvals given under a mandate.
const voidMandateApprovalsSQL = voidApprovalsUnderSQL + `= $1`

// voidSupersededApprovalsSQL voids the live approvals given under the
// mandates that the mandate $1 replaces: the other unrevoked ones of its
// agent on its rail account created no later than it, when it is in force
// now (the newest mandate whose validity contains now decides). One valid
// only from a later time replaces nothing yet: the mandate in force keeps
// its approvals until then, and the ladder refuses them from then on.
const voidSupersededApprovalsSQL = voidApprovalsUnderSQL + `IN (
		SELECT o.hash FROM mandates n JOIN mandates o ON o.agent_id = n.agent_id AND o.rail_account = n.rail_account
		WHERE n.hash = $1 AND o.hash <> n.hash AND o.revoked_at IS NULL AND o.created_at <= n.created_at
		  AND n.valid_from <= now() AND now() < n.valid_until)`

// ActiveMandate returns the newest unrevoked mandate of agentID on
// railAccount whose validity window [valid_from, valid_until) contains at;
// ErrNotFound when there is none.
func (s *Store) ActiveMandate(ctx context.Context, agentID, railAccount string, at time.Time) (MandateRecord, error) {
	return activeMandate(ctx, s.pool, agentID, railAccount, at, "")
}

// ActiveMandate is Store.ActiveMandate inside the deciding transaction. It
// also takes a share lock on the mandate row, so a concurrent RevokeMandate
// waits for this transaction and a decision never commits under a mandate
// revoked before it.
func (tx *Tx) ActiveMandate(ctx context.Context, agentID, railAccount string, at time.Time) (MandateRecord, error) {
	return activeMandate(ctx, tx.tx, agentID, railAccount, at, " FOR SHARE")
}

func activeMandate(ctx context.Context, q querier, agentID, railAccount string, at time.Time, lock string) (MandateRecord, error) {
	// A mandate decides only while its owner holds its rail account.
	r, err := scanMandate(q.QueryRow(ctx, `SELECT `+mandateColumns+` FROM mandates m
		WHERE agent_id = $1 AND rail_account = $2 AND revoked_at IS NULL
		  AND valid_from <= $3 AND $3 < valid_until AND `+heldByOwner+`
		ORDER BY created_at DESC, hash
		LIMIT 1`+lock, agentID, railAccount, at))
	if errors.Is(err, pgx.ErrNoRows) {
		return MandateRecord{}, fmt.Errorf("%w: active mandate for agent %s on %s", ErrNotFound, agentID, railAccount)
	}
	if err != nil {
		return MandateRecord{}, classify(fmt.Errorf("ledger: active mandate: %w", err))
	}
	return r, nil
}
