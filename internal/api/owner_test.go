package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/pgtest"
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
	s, _ := ownerServer(t)
	a, err := s.CreateAgent(as("own_m"), &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: "payout-bot"}})
	if err != nil {
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
	bad := &countersignv1.Mandate{AgentId: a.GetAgent().GetAgentId()}
	if _, err := s.CreateMandate(as("own_m"), &countersignv1.CreateMandateRequest{Mandate: bad}); code(err) != codes.InvalidArgument {
		t.Fatalf("invalid mandate: %v", err)
	}
}
