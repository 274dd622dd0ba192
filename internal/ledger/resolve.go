package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/intent"
)

// ErrNotResolvable is a resolution the intent cannot take: it is not
// QUARANTINED, or the resolution contradicts what the ledger holds.
var ErrNotResolvable = errors.New("ledger: the intent cannot be resolved so")

// Resolution is an owner's resolution of a QUARANTINED intent, made after
// checking the rail: the action applied, as the rail's entity EntityID, or
// it did not apply. Note says what the owner found; it becomes the intent's
// reason and its audit record's detail.
type Resolution struct {
	Applied  bool
	EntityID string
	Note     string
}

// Resolve settles a QUARANTINED intent of ownerID's agents, on a rail
// account ownerID still holds, as r says, in
// one transaction: the resolution's row (who, what, why; never changed),
// then the transition, whose audit record names them. Applied posts the
// intent's hold and ends APPLIED on its latest attempt; not applied voids
// the hold and ends BLOCKED, so the action is never sent again on the
// owner's word (an owner who wants it done sends it anew with a distinct
// reason: a new key). Not applied is refused while the rail has answered
// any attempt applied, and applied for an intent that never had an
// attempt (nothing left through Countersign). The database checks each of
// these again (migration 00033).
func (s *Store) Resolve(ctx context.Context, ownerID string, k Key, r Resolution) (Intent, error) {
	var out Intent
	err := s.inTx(ctx, OpIntentResolve, func(tx *Tx) error {
		var owned bool
		if err := tx.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM intents i JOIN agents a ON a.id = i.agent_id
			WHERE a.owner_id = $1 AND i.rail_account = $2 AND i.sik = $3
			  AND i.rail_account IN (SELECT rail_account FROM rail_account_owners WHERE owner_id = $1 AND revoked_at IS NULL))`, ownerID, k.RailAccount, k.SIK).Scan(&owned); err != nil {
			return err
		}
		if !owned {
			return fmt.Errorf("%w: intent %s", ErrNotFound, k)
		}
		it, err := tx.lockIntent(ctx, k)
		if err != nil {
			return err
		}
		if it.State != intent.Quarantined {
			return fmt.Errorf("%w: intent %s is %s; only a QUARANTINED intent is resolved by its owner", ErrNotResolvable, k, it.State)
		}
		ev, outcome, entity := intent.ResolvedNotApplied, "not_applied", any(nil)
		reason := fmt.Sprintf("resolved not applied by owner %s: %s", ownerID, r.Note)
		if r.Applied {
			if it.AttemptCount == 0 {
				return fmt.Errorf("%w: intent %s never had an attempt, so nothing left through Countersign: resolve it not applied", ErrNotResolvable, k)
			}
			ev, outcome, entity = intent.ResolvedApplied, "applied", r.EntityID
			reason = fmt.Sprintf("resolved applied as %s by owner %s: %s", r.EntityID, ownerID, r.Note)
		} else {
			var seq int
			var answered string
			err := tx.tx.QueryRow(ctx, `SELECT attempt_seq, entity_id FROM attempts
				WHERE rail_account = $1 AND sik = $2 AND entity_id IS NOT NULL ORDER BY attempt_seq LIMIT 1`, k.RailAccount, k.SIK).Scan(&seq, &answered)
			switch {
			case err == nil:
				return fmt.Errorf("%w: the rail answered attempt %d of intent %s applied (entity %s); resolve it applied", ErrNotResolvable, seq, k, answered)
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
		}
		if _, err := tx.tx.Exec(ctx, `INSERT INTO intent_resolutions (rail_account, sik, owner_id, outcome, rail_entity_id, note)
			VALUES ($1, $2, $3, $4, $5, $6)`, k.RailAccount, k.SIK, ownerID, outcome, entity, r.Note); err != nil {
			return err
		}
		out, err = tx.transition(ctx, it, ev, transitionOpts{reason: reason, entityID: r.EntityID})
		return err
	})
	return out, classify(err)
}
