package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
)

// applyMandate stores m (times truncated to what the ledger keeps) and
// returns its hash.
func applyMandate(t *testing.T, store *ledger.Store, m *countersignv1.Mandate) string {
	t.Helper()
	rec, err := mandate.Record(m)
	if err != nil {
		t.Fatal(err)
	}
	// The operator's grant of the account to the agent's owner
	// (`countersign owner grant-account`): a mandate needs it.
	owner, err := store.AgentOwner(context.Background(), rec.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.GrantRailAccount(context.Background(), rec.RailAccount, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateMandate(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return rec.Hash
}

// generousMandate lets the agent refund and pay out in currency on the
// account, up to amounts no test reaches, for a day.
func generousMandate(agentID, account string, rail countersignv1.Rail, currency string) *countersignv1.Mandate {
	now := time.Now().Truncate(time.Second)
	return &countersignv1.Mandate{
		Rail: rail, RailAccount: account, AgentId: agentID, Purpose: "e2e",
		ValidFrom: timestamppb.New(now.Add(-time.Hour)), ValidUntil: timestamppb.New(now.Add(24 * time.Hour)),
		Mode: countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 1 << 50, Currencies: []string{currency}},
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, MaxAmountMinor: 1 << 50, Currencies: []string{currency}},
		},
	}
}
