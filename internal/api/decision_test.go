package api

import (
	"context"
	"reflect"
	"strings"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
)

// recordingEngine records what Decide hands the engine.
type recordingEngine struct {
	Engine
	actions []rail.Action
	reqs    []engine.Request
}

func (e *recordingEngine) DecideAction(_ context.Context, req engine.Request, _ string, a rail.Action) engine.Outcome {
	e.reqs, e.actions = append(e.reqs, req), append(e.actions, a)
	return engine.Outcome{Verdict: engine.Block, ReasonCode: "recorded"}
}

func (e *recordingEngine) Authenticate(context.Context, engine.Caller) (ledger.Principal, error) {
	return ledger.Principal{}, nil
}

// TestAgentProvenanceClaimIsIgnored: the native API's ProvenanceClaim (an
// agent's own word for the tool description it saw) never reaches the
// gates: the engine is handed the same action with or without it, so an
// agent that asserts the pinned hash gains nothing (G6 reads the
// description from the MCP server itself).
func TestAgentProvenanceClaimIsIgnored(t *testing.T) {
	amount := int64(9000)
	action := func(claim *countersignv1.ProvenanceClaim) *countersignv1.DecideRequest {
		return &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_Action{Action: &countersignv1.ProposedAction{
			Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_mcp", ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND,
			Subject: "pi_1", AmountMinor: &amount, Provenance: claim}}}
	}
	e := &recordingEngine{}
	s := NewDecisionServer(e, nil, nil)
	for _, claim := range []*countersignv1.ProvenanceClaim{nil, {Host: "mcp.stripe.com", McpToolName: "create_refund", McpToolDescriptionHash: strings.Repeat("ab", 32)}} {
		if _, err := s.Decide(context.Background(), action(claim)); err != nil {
			t.Fatalf("Decide: %v", err)
		}
	}
	if len(e.actions) != 2 || !reflect.DeepEqual(e.actions[0], e.actions[1]) || !reflect.DeepEqual(e.reqs[0], e.reqs[1]) {
		t.Fatalf("the claim changed what the engine decides on:\n%+v\n%+v", e.actions, e.reqs)
	}
}
