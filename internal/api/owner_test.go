package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/ledgertest"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, func(ctx context.Context, url string) error {
		_, err := ledger.Migrate(ctx, url, nil)
		return err
	})
}

type ownerKey struct{}

func as(owner string) context.Context {
	return context.WithValue(context.Background(), ownerKey{}, owner)
}

func ownerServer(t *testing.T) (*OwnerServer, *ledger.Store) {
	t.Helper()
	store, err := ledger.Open(context.Background(), pgtest.NewDatabase(t), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return NewOwnerServer(store, func(ctx context.Context) (string, error) {
		o, _ := ctx.Value(ownerKey{}).(string)
		if o == "" {
			return "", errors.New("no owner")
		}
		return o, nil
	}), store
}

func code(err error) codes.Code { return status.Code(err) }

func TestOwnerAPIScopesEverythingToTheOwner(t *testing.T) {
	s, store := ownerServer(t)
	a, err := s.CreateAgent(as("own_a"), &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: "refund-bot"}})
	if err != nil {
		t.Fatal(err)
	}
	id := a.GetAgent().GetAgentId()
	if _, err := s.GetAgent(as("own_b"), &countersignv1.GetAgentRequest{AgentId: id}); code(err) != codes.NotFound {
		t.Fatalf("another owner reads the agent: %v", err)
	}
	if _, err := s.RevokeAgent(as("own_b"), &countersignv1.RevokeAgentRequest{AgentId: id}); code(err) != codes.NotFound {
		t.Fatalf("another owner revokes the agent: %v", err)
	}
	if _, err := s.IssueCredential(as("own_b"), &countersignv1.IssueCredentialRequest{AgentId: id,
		Scope: countersignv1.CredentialScope_CREDENTIAL_SCOPE_EXECUTE, ExpireTime: timestamppb.New(time.Now().Add(time.Hour))}); code(err) != codes.NotFound {
		t.Fatalf("another owner issues a credential: %v", err)
	}
	if l, err := s.ListAgents(as("own_b"), &countersignv1.ListAgentsRequest{}); err != nil || len(l.GetAgents()) != 0 {
		t.Fatalf("another owner lists %v, %v", l, err)
	}
	if _, err := s.ListAgents(context.Background(), &countersignv1.ListAgentsRequest{}); code(err) != codes.Unauthenticated {
		t.Fatalf("no owner: %v", err)
	}

	// The credential's secret is in the issuing answer only, and works.
	issued, err := s.IssueCredential(as("own_a"), &countersignv1.IssueCredentialRequest{AgentId: id,
		Scope: countersignv1.CredentialScope_CREDENTIAL_SCOPE_EXECUTE, ExpireTime: timestamppb.New(time.Now().Add(time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	hash, err := credential.Hash(issued.GetSecret())
	if err != nil {
		t.Fatalf("issued secret %q is not a credential: %v", issued.GetSecret(), err)
	}
	if p, err := store.LookupCredential(context.Background(), hash); err != nil || p.Agent.ID != id {
		t.Fatalf("issued credential does not resolve: %+v %v", p, err)
	}
	list, err := s.ListCredentials(as("own_a"), &countersignv1.ListCredentialsRequest{AgentId: id})
	if err != nil || len(list.GetCredentials()) != 1 || list.GetCredentials()[0].GetState() != countersignv1.CredentialState_CREDENTIAL_STATE_ACTIVE {
		t.Fatalf("credentials = %v, %v", list, err)
	}
	revoked, err := s.RevokeCredential(as("own_a"), &countersignv1.RevokeCredentialRequest{AgentId: id, CredentialId: issued.GetCredential().GetCredentialId()})
	if err != nil || revoked.GetCredential().GetState() != countersignv1.CredentialState_CREDENTIAL_STATE_REVOKED {
		t.Fatalf("revoke = %v, %v", revoked, err)
	}
	if p, _ := store.LookupCredential(context.Background(), hash); p.Credential.RevokedAt == nil {
		t.Fatal("revocation did not reach the ledger")
	}
}

func TestOwnerAPIPagesAgents(t *testing.T) {
	s, _ := ownerServer(t)
	for range 5 {
		if _, err := s.CreateAgent(as("own_p"), &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: "bot"}}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	token := ""
	for pages := 0; ; pages++ {
		l, err := s.ListAgents(as("own_p"), &countersignv1.ListAgentsRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range l.GetAgents() {
			if seen[a.GetAgentId()] {
				t.Fatalf("agent %s on two pages", a.GetAgentId())
			}
			seen[a.GetAgentId()] = true
		}
		if token = l.GetNextPageToken(); token == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != 5 {
		t.Fatalf("paged %d agents, want 5", len(seen))
	}
	if _, err := s.ListAgents(as("own_p"), &countersignv1.ListAgentsRequest{PageToken: "!!"}); code(err) != codes.InvalidArgument {
		t.Fatalf("bad page token: %v", err)
	}
}

func TestOwnerAPIMandates(t *testing.T) {
	s, store := ownerServer(t)
	a, err := s.CreateAgent(as("own_m"), &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: "payout-bot"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.GrantRailAccount(context.Background(), "acct_1", "own_m"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	m := &countersignv1.Mandate{Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_1", AgentId: a.GetAgent().GetAgentId(),
		Purpose: "refunds", ValidFrom: timestamppb.New(now), ValidUntil: timestamppb.New(now.Add(time.Hour)),
		Mode:   countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 5000, Currencies: []string{"USD"}}}}
	created, err := s.CreateMandate(as("own_m"), &countersignv1.CreateMandateRequest{Mandate: m})
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.CreateMandate(as("own_m"), &countersignv1.CreateMandateRequest{Mandate: m})
	if err != nil || again.GetMandateHash() != created.GetMandateHash() {
		t.Fatalf("applying twice: %v, %v", again, err)
	}
	if _, err := s.GetMandate(as("own_x"), &countersignv1.GetMandateRequest{MandateHash: created.GetMandateHash()}); code(err) != codes.NotFound {
		t.Fatalf("another owner reads the mandate: %v", err)
	}
	r, err := s.RevokeMandate(as("own_m"), &countersignv1.RevokeMandateRequest{MandateHash: created.GetMandateHash(), Reason: "done"})
	if err != nil || r.GetMandate().GetState() != countersignv1.MandateState_MANDATE_STATE_REVOKED || r.GetMandate().GetRevokeReason() != "done" {
		t.Fatalf("revoke = %v, %v", r, err)
	}
	// A second owner cannot put a mandate on own_m's account, and is told
	// the same as for an account that does not exist.
	x, err := s.CreateAgent(as("own_x"), &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: "squatter"}})
	if err != nil {
		t.Fatal(err)
	}
	var refusals []string
	for _, acct := range []string{"acct_1", "acct_nowhere"} {
		squat := proto.Clone(m).(*countersignv1.Mandate)
		squat.AgentId, squat.RailAccount = x.GetAgent().GetAgentId(), acct
		_, err := s.CreateMandate(as("own_x"), &countersignv1.CreateMandateRequest{Mandate: squat})
		if code(err) != codes.PermissionDenied {
			t.Fatalf("own_x mandates on %s: %v, want PermissionDenied", acct, err)
		}
		refusals = append(refusals, strings.ReplaceAll(err.Error(), acct, "X"))
	}
	if refusals[0] != refusals[1] {
		t.Fatalf("the refusal tells a held account from a missing one: %q", refusals)
	}
	if l, err := s.ListMandates(as("own_x"), &countersignv1.ListMandatesRequest{}); err != nil || len(l.GetMandates()) != 0 {
		t.Fatalf("own_x has mandates after refusals: %v, %v", l, err)
	}
	bad := &countersignv1.Mandate{AgentId: a.GetAgent().GetAgentId()}
	if _, err := s.CreateMandate(as("own_m"), &countersignv1.CreateMandateRequest{Mandate: bad}); code(err) != codes.InvalidArgument {
		t.Fatalf("invalid mandate: %v", err)
	}
}

func TestOwnerAPIListsAndWatchesIntents(t *testing.T) {
	s, store := ownerServer(t)
	ctx := context.Background()
	a, err := s.CreateAgent(as("own_w"), &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: "bot"}})
	if err != nil {
		t.Fatal(err)
	}
	propose := func(n int) {
		t.Helper()
		sk := fmt.Sprintf("WATCHSIK%024d", n)
		sk = strings.NewReplacer("0", "A", "1", "B", "2", "C", "3", "D", "4", "E", "5", "F", "6", "G", "7", "H", "8", "I", "9", "J").Replace(sk)
		k := ledger.Key{RailAccount: "acct_w", SIK: sk}
		if err := ledgertest.InFlight(ctx, store, ledger.NewIntent{Key: k, Rail: "stripe", Action: "refund", Subject: "pi_w", AmountMinor: 1,
			Currency: "USD", Canonical: "{}", AgentID: a.GetAgent().GetAgentId()}, k.SIK); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		propose(i)
	}
	l, err := s.ListIntents(as("own_w"), &countersignv1.ListIntentsRequest{PageSize: 2})
	if err != nil || len(l.GetIntents()) != 2 || l.GetNextPageToken() == "" {
		t.Fatalf("page 1 = %v, %v", l, err)
	}
	l2, err := s.ListIntents(as("own_w"), &countersignv1.ListIntentsRequest{PageSize: 2, PageToken: l.GetNextPageToken()})
	if err != nil || len(l2.GetIntents()) != 1 || l2.GetIntents()[0].GetSik() == l.GetIntents()[0].GetSik() {
		t.Fatalf("page 2 = %v, %v", l2, err)
	}
	if other, err := s.ListIntents(as("own_other"), &countersignv1.ListIntentsRequest{}); err != nil || len(other.GetIntents()) != 0 {
		t.Fatalf("another owner lists %v, %v", other, err)
	}
}

func TestWatchIntentsStreamsTransitions(t *testing.T) {
	_, store, conn := servedOwnerAPI(t)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-test-owner", "own_watch"), 20*time.Second)
	defer cancel()
	agent, err := store.CreateAgent(ctx, "own_watch", "bot")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := countersignv1.NewOwnerServiceClient(conn).WatchIntents(ctx, &countersignv1.WatchIntentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	k := ledger.Key{RailAccount: "acct_w", SIK: strings.Repeat("W", 32)}
	go func() {
		// The watch re-reads a window behind its start, so a transition
		// made as it starts is not lost.
		if err := ledgertest.InFlight(context.Background(), store, ledger.NewIntent{Key: k, Rail: "stripe", Action: "refund", Subject: "pi_w",
			AmountMinor: 1, Currency: "USD", Canonical: "{}", AgentID: agent.ID}, k.SIK); err != nil {
			return
		}
		_, _ = store.Commit(context.Background(), ledger.AttemptResult{Key: k, Seq: 1, Outcome: ledger.OutcomeApplied, EntityID: "re_w", Reason: "applied"})
	}()
	var got []string
	for len(got) < 2 {
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		if m.GetIntent().GetSik() != k.SIK {
			t.Fatalf("transition of another intent: %v", m)
		}
		got = append(got, m.GetTransition().GetToState().String())
	}
	// Its birth (one record: it is born IN_FLIGHT), then its answer.
	want := []string{"INTENT_STATE_IN_FLIGHT", "INTENT_STATE_APPLIED"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

func TestOwnerAPIListsMandates(t *testing.T) {
	s, store := ownerServer(t)
	a, err := s.CreateAgent(as("own_l"), &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: "bot"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.GrantRailAccount(context.Background(), "acct_1", "own_l"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	for i := range 3 {
		m := &countersignv1.Mandate{Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_1", AgentId: a.GetAgent().GetAgentId(),
			Purpose: fmt.Sprintf("edition %d", i), ValidFrom: timestamppb.New(now), ValidUntil: timestamppb.New(now.Add(time.Hour)),
			Mode:   countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
			Grants: []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 5000, Currencies: []string{"USD"}}}}
		if _, err := s.CreateMandate(as("own_l"), &countersignv1.CreateMandateRequest{Mandate: m}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	token := ""
	for range 5 {
		l, err := s.ListMandates(as("own_l"), &countersignv1.ListMandatesRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range l.GetMandates() {
			seen[m.GetMandateHash()] = true
		}
		if token = l.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(seen) != 3 {
		t.Fatalf("listed %d mandates, want 3", len(seen))
	}
	if l, err := s.ListMandates(as("own_other"), &countersignv1.ListMandatesRequest{}); err != nil || len(l.GetMandates()) != 0 {
		t.Fatalf("another owner lists %v %v", l, err)
	}
}

// WatchApprovals sends the live set when it starts, then every change to
// one of the owner's approvals: a new HOLD, approval, rejection, running
// out and voiding; never another owner's.
func TestWatchApprovalsFollowsEveryChange(t *testing.T) {
	_, store, conn := servedOwnerAPI(t)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-test-owner", "own_wa"), 30*time.Second)
	defer cancel()
	mine, err := store.CreateAgent(ctx, "own_wa", "bot")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := store.CreateAgent(ctx, "own_other", "bot")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	hold := func(agentID string, ttl time.Duration) string {
		t.Helper()
		n++
		k := ledger.Key{RailAccount: "acct_wa", SIK: strings.Repeat(string(rune('A'+n)), 32)}
		if err := store.InTx(ctx, func(tx *ledger.Tx) error {
			it, _, err := tx.CreateIntent(ctx, ledger.NewIntent{Key: k, Rail: "stripe", Action: "refund", Subject: "pi_wa",
				AmountMinor: int64(100 * n), Currency: "USD", Canonical: fmt.Sprintf(`{"n":%d}`, n), AgentID: agentID})
			if err != nil {
				return err
			}
			if it, err = tx.Transition(ctx, it, intent.GatesHeld, ledger.TransitionOpts{Reason: "needs approval"}); err != nil {
				return err
			}
			return tx.OpenApproval(ctx, it, ledger.ApprovalSpec{TTL: ttl})
		}); err != nil {
			t.Fatalf("hold %d: %v", n, err)
		}
		as, err := store.LiveApprovals(ctx, map[string]string{mine.ID: "own_wa", theirs.ID: "own_other"}[agentID], "", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.SIK == k.SIK {
				return a.ID
			}
		}
		t.Fatalf("no approval for hold %d", n)
		return ""
	}

	first := hold(mine.ID, time.Hour)
	stream, err := countersignv1.NewOwnerServiceClient(conn).WatchApprovals(ctx, &countersignv1.WatchApprovalsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(wantID string, want countersignv1.ApprovalState, initial bool) {
		t.Helper()
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("waiting for %s %s: %v", wantID, want, err)
		}
		if a := m.GetApproval(); a.GetApprovalId() != wantID || a.GetState() != want || m.GetInitial() != initial {
			t.Fatalf("got %s %s initial=%v, want %s %s initial=%v", a.GetApprovalId(), a.GetState(), m.GetInitial(), wantID, want, initial)
		}
	}
	next(first, countersignv1.ApprovalState_APPROVAL_STATE_PENDING, true)
	if m, err := stream.Recv(); err != nil || !m.GetSynced() || m.GetApproval() != nil {
		t.Fatalf("after the live set: %v, %v; want the synced marker alone", m, err)
	}

	_ = hold(theirs.ID, time.Hour) // another owner's HOLD is never sent
	second := hold(mine.ID, time.Hour)
	next(second, countersignv1.ApprovalState_APPROVAL_STATE_PENDING, false)
	if _, err := store.Approve(ctx, "own_wa", first, "", "ok"); err != nil {
		t.Fatal(err)
	}
	next(first, countersignv1.ApprovalState_APPROVAL_STATE_APPROVED, false)
	if _, err := store.Reject(ctx, "own_wa", second, "no"); err != nil {
		t.Fatal(err)
	}
	next(second, countersignv1.ApprovalState_APPROVAL_STATE_REJECTED, false)
	short := hold(mine.ID, 400*time.Millisecond)
	next(short, countersignv1.ApprovalState_APPROVAL_STATE_PENDING, false)
	next(short, countersignv1.ApprovalState_APPROVAL_STATE_EXPIRED, false)
	// Revoking the agent voids its approvals (in the same transaction).
	if err := store.RevokeAgent(ctx, mine.ID); err != nil {
		t.Fatal(err)
	}
	next(first, countersignv1.ApprovalState_APPROVAL_STATE_VOID, false)
}

// TestRevokeCredentialAnswersPastTheFirstThousand: the answer of a
// revocation is the revoked credential as it now reads, wherever it falls
// among the agent's credentials (it was looked for among the first 1000
// only, and a successful revocation answered NotFound).
func TestRevokeCredentialAnswersPastTheFirstThousand(t *testing.T) {
	s, store := ownerServer(t)
	a, err := s.CreateAgent(as("own_a"), &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: "many-keys"}})
	if err != nil {
		t.Fatal(err)
	}
	id := a.GetAgent().GetAgentId()
	var last string
	for range 1001 {
		_, hash, err := credential.Generate()
		if err != nil {
			t.Fatal(err)
		}
		c, err := store.IssueCredential(context.Background(), id, credential.ScopeExecute, time.Now().Add(time.Hour), hash)
		if err != nil {
			t.Fatal(err)
		}
		last = max(last, c.ID)
	}
	revoked, err := s.RevokeCredential(as("own_a"), &countersignv1.RevokeCredentialRequest{AgentId: id, CredentialId: last})
	if err != nil || revoked.GetCredential().GetCredentialId() != last || revoked.GetCredential().GetState() != countersignv1.CredentialState_CREDENTIAL_STATE_REVOKED {
		t.Fatalf("revoke of the 1001st credential = %v, %v", revoked, err)
	}
}

// servedOwnerAPI is an OwnerServer on a fresh ledger, served over gRPC on
// loopback, whose caller is the owner its metadata names (x-test-owner),
// and a client connection to it; both are closed when t ends.
func servedOwnerAPI(t *testing.T) (*OwnerServer, *ledger.Store, *grpc.ClientConn) {
	t.Helper()
	store, err := ledger.Open(context.Background(), pgtest.NewDatabase(t), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	srv := NewOwnerServer(store, func(ctx context.Context) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-test-owner"); len(v) == 1 {
			return v[0], nil
		}
		return "", errors.New("no owner")
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	countersignv1.RegisterOwnerServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return srv, store, conn
}
