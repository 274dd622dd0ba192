package cli

import (
	"context"
	"strings"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// fakeIntents answers ListIntents and ResolveIntent as the owner API would,
// recording what it was asked.
type fakeIntents struct {
	countersignv1.UnimplementedOwnerServiceServer
	listed   *countersignv1.ListIntentsRequest
	resolved *countersignv1.ResolveIntentRequest
}

func (f *fakeIntents) ListIntents(_ context.Context, r *countersignv1.ListIntentsRequest) (*countersignv1.ListIntentsResponse, error) {
	f.listed = r
	return &countersignv1.ListIntentsResponse{Intents: []*countersignv1.Intent{{
		Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_1", Sik: "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567",
		State: countersignv1.IntentState_INTENT_STATE_QUARANTINED, ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND,
		Subject: "pi_1", Amount: &countersignv1.Money{AmountMinor: 4200, Currency: "USD"}, AgentId: "agt_bench",
		LastReason: "the rail reported attempt 1 applied after the intent was settled"}}}, nil
}

func (f *fakeIntents) ResolveIntent(_ context.Context, r *countersignv1.ResolveIntentRequest) (*countersignv1.ResolveIntentResponse, error) {
	f.resolved = r
	state := countersignv1.IntentState_INTENT_STATE_BLOCKED
	if r.GetResolution() == countersignv1.IntentResolution_INTENT_RESOLUTION_APPLIED {
		state = countersignv1.IntentState_INTENT_STATE_APPLIED
	}
	return &countersignv1.ResolveIntentResponse{Intent: &countersignv1.Intent{RailAccount: r.GetRailAccount(), Sik: r.GetSik(),
		State: state, LastReason: "resolved by owner own_1: " + r.GetNote()}}, nil
}

func TestIntentsListAndResolve(t *testing.T) {
	f := &fakeIntents{}
	flags := []string{"--server", startFakeOwner(t, f), "--owner-token", "cso_test"}
	const sik = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

	r := runCLI(t, "", append([]string{"intents", "list", "--state", "quarantined"}, flags...)...)
	if r.err != nil {
		t.Fatalf("intents list: %v\n%s", r.err, r.errOut)
	}
	if f.listed.GetState() != countersignv1.IntentState_INTENT_STATE_QUARANTINED {
		t.Errorf("list asked for state %s", f.listed.GetState())
	}
	for _, w := range []string{"SIK", "STATE", sik, "quarantined", "refund", "pi_1", "42.00 USD", "agt_bench"} {
		if !strings.Contains(r.out, w) {
			t.Errorf("intents list lacks %q:\n%s", w, r.out)
		}
	}
	if r := runCLI(t, "", append([]string{"intents", "list", "--state", "stuck"}, flags...)...); r.err == nil || !strings.Contains(r.err.Error(), "not an intent state") {
		t.Errorf("list --state stuck: %v", r.err)
	}

	r = runCLI(t, "", append([]string{"intents", "resolve", "acct_1", sik, "--applied", "re_1", "--note", "re_1 in the dashboard"}, flags...)...)
	if r.err != nil {
		t.Fatalf("resolve --applied: %v", r.err)
	}
	if g := f.resolved; g.GetResolution() != countersignv1.IntentResolution_INTENT_RESOLUTION_APPLIED || g.GetRailEntityId() != "re_1" ||
		g.GetSik() != sik || g.GetRailAccount() != "acct_1" || g.GetNote() != "re_1 in the dashboard" {
		t.Errorf("resolve --applied sent %v", g)
	}
	if !strings.Contains(r.out, "applied") {
		t.Errorf("resolve --applied printed %q", r.out)
	}
	r = runCLI(t, "", append([]string{"intents", "resolve", "acct_1", sik, "--not-applied", "--note", "nothing at the rail"}, flags...)...)
	if r.err != nil || f.resolved.GetResolution() != countersignv1.IntentResolution_INTENT_RESOLUTION_NOT_APPLIED || f.resolved.GetRailEntityId() != "" {
		t.Fatalf("resolve --not-applied: %v, sent %v", r.err, f.resolved)
	}
	if !strings.Contains(r.out, "blocked") {
		t.Errorf("resolve --not-applied printed %q", r.out)
	}

	// What the owner found must be said, once, with a note: refused before
	// any call.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--note", "x"}, "exactly one of --applied"},
		{[]string{"--applied", "re_1", "--not-applied", "--note", "x"}, "exactly one of --applied"},
		{[]string{"--not-applied"}, "--note is required"},
		{[]string{"--not-applied", "--note", "  "}, "--note is required"},
	} {
		f.resolved = nil
		r := runCLI(t, "", append(append([]string{"intents", "resolve", "acct_1", sik}, c.args...), flags...)...)
		if r.err == nil || !strings.Contains(r.err.Error(), c.want) || f.resolved != nil {
			t.Errorf("resolve %v = %v (sent %v), want %q before any call", c.args, r.err, f.resolved, c.want)
		}
	}
}

// TestOwnerCommandsNeedAServer: an owner command sends the owner token to
// --server, which has no default: in a pod 127.0.0.1 is shared with the
// agent, which could listen on the port a default named and take it.
func TestOwnerCommandsNeedAServer(t *testing.T) {
	for _, args := range [][]string{
		{"intents", "list"},
		{"approvals", "list"},
		{"agent", "list"},
	} {
		r := runCLI(t, "", append(args, "--owner-token", "cso_test")...)
		if r.err == nil || !strings.Contains(r.err.Error(), "say where the owner API is") {
			t.Errorf("%v without --server = %v", args, r.err)
		}
	}
}
