package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/intent"
)

// Approval is an owner's decision on one HELD request.
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
}

// Fingerprint is the request fingerprint an approval is bound to: the
// SHA-256 of the intent's canonical action.
func Fingerprint(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return hex.EncodeToString(sum[:])
}

// ErrApprovalState means the approval cannot make the asked move (already
// decided, expired, used).
var ErrApprovalState = errors.New("ledger: approval is not pending")

const approvalColumns = `id, rail_account, sik, owner_id, agent_id, mandate_hash, fingerprint, gates, state, note,
	created_at, expires_at, decided_at`

func scanApproval(row pgx.Row) (Approval, error) {
	var a Approval
	var gates []byte
	err := row.Scan(&a.ID, &a.RailAccount, &a.SIK, &a.OwnerID, &a.AgentID, &a.MandateHash, &a.Fingerprint, &gates,
		&a.State, &a.Note, &a.CreatedAt, &a.ExpiresAt, &a.DecidedAt)
	if err == nil && len(gates) > 0 {
		err = json.Unmarshal(gates, &a.Gates)
	}
	return a, err
}

// openApproval creates the pending approval of a HELD intent (or keeps the
// live one).
func (tx *Tx) openApproval(ctx context.Context, it Intent, v GateVerdict) error {
	id, err := credential.NewID("apr")
	if err != nil {
		return err
	}
	ttl := v.ApprovalTTL
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	gates, err := json.Marshal(v.Gates)
	if err != nil {
		return err
	}
	_, err = tx.tx.Exec(ctx, `
		INSERT INTO approvals (id, rail_account, sik, owner_id, agent_id, mandate_hash, fingerprint, gates, expires_at)
		SELECT $1, $2, $3, a.owner_id, a.id, $5, $6, $7, now() + $8::bigint * interval '1 microsecond'
		FROM agents a WHERE a.id = $4
		ON CONFLICT (rail_account, sik) WHERE state IN ('pending', 'approved') DO NOTHING`,
		id, it.RailAccount, it.SIK, it.AgentID, v.MandateHash, Fingerprint(it.Canonical), gates, ttl.Microseconds())
	return err
}

// LiveApproval returns the pending or approved approval of an intent;
// found is false when there is none. An expired one is marked expired.
func (tx *Tx) LiveApproval(ctx context.Context, k Key) (Approval, bool, error) {
	if _, err := tx.tx.Exec(ctx, `UPDATE approvals SET state = 'expired'
		WHERE rail_account = $1 AND sik = $2 AND state IN ('pending', 'approved') AND expires_at <= now()`, k.RailAccount, k.SIK); err != nil {
		return Approval{}, false, err
	}
	a, err := scanApproval(tx.tx.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE rail_account = $1 AND sik = $2 AND state IN ('pending', 'approved') FOR UPDATE`, k.RailAccount, k.SIK))
	if errors.Is(err, pgx.ErrNoRows) {
		return Approval{}, false, nil
	}
	return a, err == nil, err
}

func (tx *Tx) settleApproval(ctx context.Context, k Key, from, to string) error {
	_, err := tx.tx.Exec(ctx, `UPDATE approvals SET state = $4 WHERE rail_account = $1 AND sik = $2 AND state = $3`,
		k.RailAccount, k.SIK, from, to)
	return err
}

// ListApprovals pages through an owner's approvals (state "" for all).
func (s *Store) ListApprovals(ctx context.Context, ownerID, state, agentID, after string, limit int) ([]Approval, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE owner_id = $1 AND ($2 = '' OR state = $2) AND ($3 = '' OR agent_id = $3) AND id > $4
		ORDER BY id LIMIT $5`, ownerID, state, agentID, after, limit)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Approval, error) { return scanApproval(r) })
	return out, classify(err)
}

// GetApproval returns one of an owner's approvals.
func (s *Store) GetApproval(ctx context.Context, ownerID, id string) (Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE owner_id = $1 AND id = $2`, ownerID, id))
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
	err := s.InTx(ctx, func(tx *Tx) error {
		a, err := scanApproval(tx.tx.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE owner_id = $1 AND id = $2 FOR UPDATE`, ownerID, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: approval %s", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		if a.State != "pending" || !time.Now().Before(a.ExpiresAt) {
			return fmt.Errorf("%w: approval %s is %s (expires %s)", ErrApprovalState, id, a.State, a.ExpiresAt.UTC().Format(time.RFC3339))
		}
		if fingerprint != "" && fingerprint != a.Fingerprint {
			return fmt.Errorf("%w: approval %s is for request %s, not %s", ErrApprovalState, id, a.Fingerprint, fingerprint)
		}
		if _, err := tx.tx.Exec(ctx, `UPDATE approvals SET state = $2, note = $3 WHERE id = $1`, id, to, note); err != nil {
			return err
		}
		if to == "rejected" {
			it, err := tx.lockIntent(ctx, a.Key)
			if err != nil {
				return err
			}
			if it.State == intent.Held {
				if _, err := tx.transition(ctx, it, intent.HoldRejected, transitionOpts{reason: "rejected by the owner: " + note}); err != nil {
					return err
				}
			}
		}
		out, err = scanApproval(tx.tx.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, id))
		return err
	})
	return out, classify(err)
}

// VoidApprovals voids the live approvals of an agent (revoked) or of a
// mandate (revoked): nothing held under them may move afterwards.
func (s *Store) VoidApprovals(ctx context.Context, agentID, mandateHash string) (int64, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE approvals SET state = 'void'
		WHERE state IN ('pending', 'approved') AND (($1 <> '' AND agent_id = $1) OR ($2 <> '' AND mandate_hash = $2))`,
		agentID, mandateHash)
	if err != nil {
		return 0, classify(err)
	}
	return tag.RowsAffected(), nil
}
