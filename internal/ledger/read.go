package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/credential"
)

// DecisionRead names what one decision reads before it decides, all of it
// in one pipelined round trip and none of it under a lock: the presented
// credential, the agent's mandate on the rail account, the intent the
// request was proposed as before (its alias), and whether its payee was
// ever paid. Nothing read here is trusted at commit time on its own: the
// writing transaction re-asserts what the gates relied on (Write).
type DecisionRead struct {
	CredentialHash [32]byte
	RailAccount    string
	// At is the decision time, for the mandate's validity.
	At time.Time
	// Alias is the request's alias ("" reads none); it also names the
	// request's family, whose newest intent is read (FamilyLatest) when
	// Family is set: for an action that may take an idempotency window.
	Alias  string
	Family bool
	// Payee, when set, is looked up for PayeePaidBefore.
	Payee string
}

// DecisionFacts is what a DecisionRead found.
type DecisionFacts struct {
	// Principal is the credential's; ErrNotFound in PrincipalErr when the
	// credential is unknown.
	Principal    Principal
	PrincipalErr error
	// Mandate is the agent's newest mandate on the account, an active one
	// first (LatestMandate's choice); MandateFound is false when it has none.
	Mandate      MandateRecord
	MandateFound bool
	// Aliased is the intent the alias resolved to before; nil when none.
	Aliased *Intent
	// FamilyLatest is the newest intent whose family is the alias (an
	// action under an idempotency window); nil when none.
	FamilyLatest *Intent
	// PayeePaidBefore: something on the account was applied to Payee.
	PayeePaidBefore bool
	// Remembered: the principal and mandate were not read for this
	// decision but remembered from an earlier one (the engine's), and the
	// alias was not read at all; a write made on them must check them
	// (Write.CheckPrincipal, AssertPrincipal, AssertMandate, AssertNoAlias).
	Remembered bool
}

// ReadForDecision reads r's facts in one round trip.
func (s *Store) ReadForDecision(ctx context.Context, r DecisionRead) (DecisionFacts, error) {
	var f DecisionFacts
	var b pgx.Batch
	b.Queue(principalSelect+`
		WHERE c.secret_hash = $1`, r.CredentialHash[:]).QueryRow(func(row pgx.Row) error {
		p, err := scanPrincipal(row)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			f.PrincipalErr = fmt.Errorf("%w: credential", ErrNotFound)
		case err != nil:
			return err
		}
		f.Principal = p
		return nil
	})
	// The same choice as latestMandate in one statement: an active mandate
	// first, else the newest; only on an account its owner holds.
	b.Queue(`SELECT `+mandateColumns+` FROM mandates m
		WHERE agent_id = (SELECT agent_id FROM credentials WHERE secret_hash = $1) AND rail_account = $2 AND `+heldByOwner+`
		ORDER BY (revoked_at IS NULL AND valid_from <= $3 AND $3 < valid_until) DESC, created_at DESC, hash
		LIMIT 1`, r.CredentialHash[:], r.RailAccount, r.At).QueryRow(func(row pgx.Row) error {
		m, err := scanMandate(row)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		f.Mandate, f.MandateFound = m, true
		return nil
	})
	if r.Alias != "" {
		b.Queue(`SELECT `+intentColumns+` FROM intents
			WHERE rail_account = $1 AND sik = (SELECT sik FROM intent_aliases WHERE rail_account = $1 AND alias = $2)`,
			r.RailAccount, r.Alias).QueryRow(maybeIntent(&f.Aliased))
		if r.Family {
			b.Queue(`SELECT `+intentColumns+` FROM intents WHERE rail_account = $1 AND family = $2
				ORDER BY created_at DESC, sik LIMIT 1`, r.RailAccount, r.Alias).QueryRow(maybeIntent(&f.FamilyLatest))
		}
	}
	if r.Payee != "" {
		b.Queue(`SELECT EXISTS (SELECT 1 FROM intents WHERE rail_account = $1 AND payee = $2 AND state = 'APPLIED')`,
			r.RailAccount, r.Payee).QueryRow(func(row pgx.Row) error { return row.Scan(&f.PayeePaidBefore) })
	}
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		return DecisionFacts{}, classify(fmt.Errorf("ledger: read for decision: %w", err))
	}
	return f, nil
}

// maybeIntent scans a row into *dst, leaving it nil when there is none.
func maybeIntent(dst **Intent) func(pgx.Row) error {
	return func(row pgx.Row) error {
		it, err := scanIntent(row)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		*dst = &it
		return nil
	}
}

// LivePrincipal share-locks credential id and its agent and returns them as
// they are now: a revocation (an UPDATE of either row) waits for this
// transaction, and this transaction sees one committed before it.
func (tx *Tx) LivePrincipal(ctx context.Context, credentialID string) (Principal, error) {
	// The agent's revocation lock, shared, first (see agentLock): behind
	// a revocation already waiting, never ahead of it.
	if _, err := tx.tx.Exec(ctx, `SELECT `+agentLock("pg_advisory_xact_lock_shared", "agent_id")+` FROM credentials WHERE id = $1`, credentialID); err != nil {
		return Principal{}, err
	}
	p, err := scanPrincipal(tx.tx.QueryRow(ctx, principalSelect+`
		WHERE c.id = $1 FOR SHARE OF c, a`, credentialID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, fmt.Errorf("%w: credential %s", ErrNotFound, credentialID)
	}
	return p, err
}

// AppliedAttempt is the attempt that applied an APPLIED intent, with the
// entity reconciliation found when it settled it: what a duplicate is
// answered with.
func (s *Store) AppliedAttempt(ctx context.Context, it Intent) (Attempt, error) {
	a, err := appliedAttempt(ctx, s.pool, it)
	return a, classify(err)
}

const principalSelect = `
		SELECT c.id, c.agent_id, c.scope, c.created_at, c.expires_at, c.revoked_at,
		       a.owner_id, a.name, a.status, a.created_at, a.revoked_at
		FROM credentials c JOIN agents a ON a.id = c.agent_id`

func scanPrincipal(row pgx.Row) (Principal, error) {
	var p Principal
	var scope, status string
	err := row.Scan(&p.Credential.ID, &p.Credential.AgentID, &scope, &p.Credential.CreatedAt,
		&p.Credential.ExpiresAt, &p.Credential.RevokedAt,
		&p.Agent.OwnerID, &p.Agent.Name, &status, &p.Agent.CreatedAt, &p.Agent.RevokedAt)
	if err != nil {
		return Principal{}, err
	}
	p.Credential.Scope = credential.Scope(scope)
	p.Agent.ID = p.Credential.AgentID
	p.Agent.Revoked = status == "revoked"
	return p, nil
}
