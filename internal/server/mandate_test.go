package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
)

// grantAll stores a budgeted mandate that lets agentID refund and pay out
// up to a large amount in USD on railAccount, valid for a day.
func grantAll(t testing.TB, store *ledger.Store, agentID, railAccount string) string {
	t.Helper()
	now := time.Now().Truncate(time.Second) // the ledger keeps microseconds
	m := &countersignv1.Mandate{
		Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: railAccount, AgentId: agentID, Purpose: "tests",
		ValidFrom: timestamppb.New(now.Add(-time.Hour)), ValidUntil: timestamppb.New(now.Add(24 * time.Hour)),
		Mode: countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 1 << 50, Currencies: []string{"USD"}},
			{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, MaxAmountMinor: 1 << 50, Currencies: []string{"USD"}},
		},
	}
	rec, err := mandateRecord(m)
	if err != nil {
		t.Fatal(err)
	}
	grantAccountOfAgent(t, store, railAccount, agentID)
	if _, err := store.CreateMandate(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return rec.Hash
}

// grantAccountOfAgent grants railAccount to the owner of agentID, as the
// operator does with `countersign owner grant-account`: a mandate needs
// its owner to hold its account.
func grantAccountOfAgent(t testing.TB, store *ledger.Store, railAccount, agentID string) {
	t.Helper()
	owner, err := store.AgentOwner(context.Background(), agentID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.GrantRailAccount(context.Background(), railAccount, owner); err != nil {
		t.Fatal(err)
	}
}

var mandateRecord = mandate.Record
