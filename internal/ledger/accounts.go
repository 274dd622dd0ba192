package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Rail account ownership (DESIGN.md §11): a rail account belongs to the
// owners the operator granted it to, and to nobody else. A grant is written
// by the operator only (GrantRailAccount, reached through the database URL,
// never through an API an owner or agent can call); an owner may put a
// mandate on an account only while it holds it (the database refuses the
// insert otherwise), its mandates decide only while it holds it, and it
// reads only the audit of accounts it holds.

var (
	// ErrNotHeld means the owner does not hold the rail account. It is the
	// same answer whether or not the account exists anywhere. Errors that
	// match it are *NotHeldError.
	ErrNotHeld = errors.New("ledger: rail account not held")
	// ErrForeignIntent means a proposal met an intent made by an agent of
	// another owner. Nothing about that intent is returned.
	ErrForeignIntent = errors.New("ledger: the intent belongs to another owner")
)

// NotHeldError says which rail account the owner does not hold.
type NotHeldError struct{ RailAccount string }

func (e *NotHeldError) Error() string {
	return fmt.Sprintf("rail account %q is not one of yours; the operator grants rail accounts to owners", e.RailAccount)
}

// Is makes a NotHeldError match ErrNotHeld.
func (e *NotHeldError) Is(target error) bool { return target == ErrNotHeld }

// sqlStateNotHeld is raised by the mandates insert trigger (migration 11).
const sqlStateNotHeld = "CS403"

// RailAccountGrant is one owner's hold on one rail account.
type RailAccountGrant struct {
	ID          int64
	RailAccount string
	OwnerID     string
	GrantedAt   time.Time
	GrantedBy   string
	RevokedAt   *time.Time
	RevokedBy   string
}

func validGrant(railAccount, ownerID string) error {
	switch {
	case railAccount == "" || len(railAccount) > 255 || strings.TrimSpace(railAccount) != railAccount:
		return fmt.Errorf("ledger: rail account %q must be 1 to 255 bytes without surrounding spaces", railAccount)
	case ownerID == "" || len(ownerID) > 128 || strings.TrimSpace(ownerID) != ownerID:
		return fmt.Errorf("ledger: owner id %q must be 1 to 128 bytes without surrounding spaces", ownerID)
	}
	return nil
}

// GrantRailAccount gives ownerID the rail account railAccount. Granting a
// held account again changes nothing and returns created=false. It is the
// operator's act: no API calls it.
func (s *Store) GrantRailAccount(ctx context.Context, railAccount, ownerID string) (created bool, err error) {
	if err := validGrant(railAccount, ownerID); err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO rail_account_owners (rail_account, owner_id) VALUES ($1, $2)
		ON CONFLICT (rail_account, owner_id) WHERE revoked_at IS NULL DO NOTHING`, railAccount, ownerID)
	if err != nil {
		return false, classify(fmt.Errorf("ledger: grant rail account: %w", err))
	}
	return tag.RowsAffected() == 1, nil
}

// RevokeRailAccount withdraws railAccount from ownerID, one way, and in the
// same transaction revokes every unrevoked mandate of that owner on it (so
// their held approvals can be voided, and no decision under them commits
// after this returns). It returns the revoked mandates' hashes; ErrNotHeld
// when the owner did not hold the account.
func (s *Store) RevokeRailAccount(ctx context.Context, railAccount, ownerID string) ([]string, error) {
	if err := validGrant(railAccount, ownerID); err != nil {
		return nil, err
	}
	var hashes []string
	err := s.inTx(ctx, OpRailAccountRevoke, func(tx *Tx) error {
		hashes = nil
		// The revocation locks (agentLockExclusive) of the agents whose
		// mandates this revokes, first and in one order, as a revocation of
		// one of them does: a decision under way commits first, and the
		// ones after it wait for this one. Without them the UPDATE of the
		// mandates waited for the share locks of decisions that went on
		// being granted beside it, so a deciding agent held the operator's
		// withdrawal back (found by a review).
		if _, err := tx.tx.Exec(ctx, `SELECT `+agentLock("pg_advisory_xact_lock", "agent_id")+`
			FROM (SELECT DISTINCT agent_id FROM mandates
			      WHERE owner_id = $2 AND rail_account = $1 AND revoked_at IS NULL ORDER BY agent_id) a`,
			railAccount, ownerID); err != nil {
			return err
		}
		tag, err := tx.tx.Exec(ctx, `UPDATE rail_account_owners SET revoked_at = now(), revoked_by = current_user
			WHERE rail_account = $1 AND owner_id = $2 AND revoked_at IS NULL`, railAccount, ownerID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotHeld
		}
		// Not before its creation: a mandate created after this
		// transaction began, committed while it waited for a lock above,
		// is revoked too (its created_at is later than this now()).
		rows, err := tx.tx.Query(ctx, `UPDATE mandates SET revoked_at = GREATEST(now(), created_at), revoke_reason = $3
			WHERE owner_id = $2 AND rail_account = $1 AND revoked_at IS NULL RETURNING hash`,
			railAccount, ownerID, "the operator withdrew rail account "+railAccount+" from its owner")
		if err != nil {
			return err
		}
		if hashes, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		// Their approvals are void in the same transaction (RevokeMandate).
		for _, h := range hashes {
			if _, err := tx.tx.Exec(ctx, voidMandateApprovalsSQL, h); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ErrNotHeld) {
		return nil, &NotHeldError{RailAccount: railAccount}
	}
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: revoke rail account: %w", err))
	}
	return hashes, nil
}

// RailAccountGrants lists the grants of a rail account and/or an owner (an
// empty filter matches all), live and revoked, oldest first.
func (s *Store) RailAccountGrants(ctx context.Context, railAccount, ownerID string) ([]RailAccountGrant, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, rail_account, owner_id, granted_at, granted_by, revoked_at, COALESCE(revoked_by, '')
		FROM rail_account_owners WHERE ($1 = '' OR rail_account = $1) AND ($2 = '' OR owner_id = $2) ORDER BY id`,
		railAccount, ownerID)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RailAccountGrant, error) {
		var g RailAccountGrant
		err := r.Scan(&g.ID, &g.RailAccount, &g.OwnerID, &g.GrantedAt, &g.GrantedBy, &g.RevokedAt, &g.RevokedBy)
		return g, err
	})
	return out, classify(err)
}

// OwnerHoldsRailAccount returns nil when ownerID holds railAccount, and
// ErrNotHeld otherwise (whether or not the account exists).
func (s *Store) OwnerHoldsRailAccount(ctx context.Context, ownerID, railAccount string) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rail_account_owners
		WHERE owner_id = $1 AND rail_account = $2 AND revoked_at IS NULL)`, ownerID, railAccount).Scan(&ok); err != nil {
		return classify(err)
	}
	if !ok {
		return &NotHeldError{RailAccount: railAccount}
	}
	return nil
}

// heldByOwner is the SQL condition "the mandate's owner holds its rail
// account", for queries over mandates aliased m.
const heldByOwner = `EXISTS (SELECT 1 FROM rail_account_owners g
	WHERE g.rail_account = m.rail_account AND g.owner_id = m.owner_id AND g.revoked_at IS NULL)`

// AgentOwner returns the owner of agent id.
func (s *Store) AgentOwner(ctx context.Context, id string) (string, error) {
	var owner string
	err := s.pool.QueryRow(ctx, `SELECT owner_id FROM agents WHERE id = $1`, id).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("%w: agent %s", ErrNotFound, id)
	}
	return owner, classify(err)
}

// sameOwner reports whether the agents a and b have one owner. An intent
// without an agent ("") belongs to nobody.
func (tx *Tx) sameOwner(ctx context.Context, a, b string) (bool, error) {
	if a == "" || b == "" {
		return false, nil
	}
	if a == b {
		return true, nil
	}
	var same bool
	err := tx.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agents x JOIN agents y ON x.owner_id = y.owner_id
		WHERE x.id = $1 AND y.id = $2)`, a, b).Scan(&same)
	return same, err
}

// notHeld turns the mandates trigger's refusal into ErrNotHeld.
func notHeld(err error, railAccount string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlStateNotHeld {
		return &NotHeldError{RailAccount: railAccount}
	}
	return err
}
