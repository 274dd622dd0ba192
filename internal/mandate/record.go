package mandate

import (
	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
)

// Record is the ledger row of m: its canonical bytes, their hash, and the
// columns the gates select on. The owner is the agent's (the ledger fills
// it in and checks it).
func Record(m *countersignv1.Mandate) (ledger.MandateRecord, error) {
	canonical, err := Canonical(m)
	if err != nil {
		return ledger.MandateRecord{}, err
	}
	return ledger.MandateRecord{
		Hash:        HashCanonical(canonical),
		AgentID:     m.GetAgentId(),
		RailAccount: m.GetRailAccount(),
		Canonical:   canonical,
		Mode:        EnumName(m.GetMode().Descriptor(), m.GetMode().Number()),
		ValidFrom:   m.GetValidFrom().AsTime(),
		ValidUntil:  m.GetValidUntil().AsTime(),
	}, nil
}
