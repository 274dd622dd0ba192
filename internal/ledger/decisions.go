package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Decision is one answer Countersign gave, as recorded.
type Decision struct {
	ID           int64
	DecidedAt    time.Time
	RequestID    string
	Source       string // "ext_authz" or "decide"
	AgentID      string // empty when the caller was not identified
	CredentialID string
	Verdict      string // ALLOW, HOLD or BLOCK
	ReasonCode   string
	Reason       string
	Method       string
	Host         string
	Path         string
	Gates        []GateRecord
	// RailAccount and SIK name the intent the decision touched ("" if none);
	// AttemptSeq is the attempt an ALLOW started (0 if none).
	RailAccount string
	SIK         string
	AttemptSeq  int
}

// GateRecord is one gate's result as stored with a decision.
type GateRecord struct {
	Gate       string `json:"gate"`
	Verdict    string `json:"verdict"`
	ReasonCode string `json:"reason_code"`
	Reason     string `json:"reason,omitempty"`
}

// GateAllowed and GatePassed are the verdict and reason code of a gate
// that found nothing against the action (gate.ReasonPassed).
const (
	GateAllowed = "ALLOW"
	GatePassed  = "passed"
)

// gateJSON is a GateRecord as the ledger stores it.
type gateJSON struct {
	Gate       string `json:"gate"`
	Verdict    string `json:"verdict,omitempty"`
	ReasonCode string `json:"reason_code,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// MarshalJSON stores a gate that passed (verdict ALLOW, reason code
// passed, no sentence) as its name alone: an ALLOW's decision row repeats
// one for every gate of the ladder, and their verdicts and codes were
// about a third of the row and of its WAL record. Any other result is
// stored whole.
func (g GateRecord) MarshalJSON() ([]byte, error) {
	if g.Verdict == GateAllowed && g.ReasonCode == GatePassed && g.Reason == "" {
		return json.Marshal(gateJSON{Gate: g.Gate})
	}
	if g.Verdict == "" && g.ReasonCode == "" && g.Reason == "" {
		// It would read back as passed.
		return nil, fmt.Errorf("ledger: gate %q result has no verdict, reason code or reason", g.Gate)
	}
	return json.Marshal(gateJSON(g))
}

// UnmarshalJSON reads either form MarshalJSON writes (and rows written
// before the short form, always whole).
func (g *GateRecord) UnmarshalJSON(b []byte) error {
	var j gateJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if j.Verdict == "" && j.ReasonCode == "" && j.Reason == "" {
		j.Verdict, j.ReasonCode = GateAllowed, GatePassed
	}
	*g = GateRecord(j)
	return nil
}

// RecordDecision appends a decision. It returns only after the commit, so a
// caller that answers after it has a durable record of the answer.
func (s *Store) RecordDecision(ctx context.Context, d Decision) (int64, error) {
	return insertDecision(ctx, s.pool, d)
}

// querier is what both the pool and a transaction offer.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func insertDecision(ctx context.Context, q querier, d Decision) (int64, error) {
	args, err := decisionArgs(d)
	if err != nil {
		return 0, err
	}
	var id int64
	if err := q.QueryRow(ctx, insertDecisionSQL, args...).Scan(&id); err != nil {
		return 0, classify(fmt.Errorf("ledger: record decision: %w", err))
	}
	return id, nil
}

const insertDecisionSQL = `
		INSERT INTO decisions (request_id, source, agent_id, credential_id, verdict,
		                       reason_code, reason, method, host, path, gates, rail_account, sik, attempt_seq)
		VALUES ($1, $2, NULLIF($3, ''), NULLIF($4, ''), $5, $6, $7, $8, $9, $10, $11,
		        NULLIF($12, ''), NULLIF($13, ''), NULLIF($14, 0))
		RETURNING id`

func decisionArgs(d Decision) ([]any, error) {
	gates := d.Gates
	if gates == nil {
		gates = []GateRecord{}
	}
	gj, err := json.Marshal(gates)
	if err != nil {
		return nil, fmt.Errorf("ledger: decision gates: %w", err)
	}
	return []any{d.RequestID, d.Source, d.AgentID, d.CredentialID, d.Verdict,
		d.ReasonCode, d.Reason, d.Method, d.Host, d.Path, gj, d.RailAccount, d.SIK, d.AttemptSeq}, nil
}

// DecisionsByRequest returns the decisions recorded for a request id, oldest
// first.
func (s *Store) DecisionsByRequest(ctx context.Context, requestID string) ([]Decision, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, decided_at, request_id, source, COALESCE(agent_id, ''), COALESCE(credential_id, ''),
		       verdict, reason_code, reason, method, host, path, gates,
		       COALESCE(rail_account, ''), COALESCE(sik, ''), COALESCE(attempt_seq, 0)
		FROM decisions WHERE request_id = $1 ORDER BY id`, requestID)
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: decisions: %w", err))
	}
	defer rows.Close()
	var out []Decision
	for rows.Next() {
		var d Decision
		var gj []byte
		if err := rows.Scan(&d.ID, &d.DecidedAt, &d.RequestID, &d.Source, &d.AgentID, &d.CredentialID,
			&d.Verdict, &d.ReasonCode, &d.Reason, &d.Method, &d.Host, &d.Path, &gj,
			&d.RailAccount, &d.SIK, &d.AttemptSeq); err != nil {
			return nil, classify(fmt.Errorf("ledger: decisions: %w", err))
		}
		if err := json.Unmarshal(gj, &d.Gates); err != nil {
			return nil, fmt.Errorf("ledger: decision %d gates: %w", d.ID, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("ledger: decisions: %w", err))
	}
	return out, nil
}
