package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// mandateRows counts the rows each SELECT of mandates returned to Go.
type mandateRows struct {
	mu  sync.Mutex
	max int64 // the most one statement returned since reset
}

type sqlKey struct{}

func (c *mandateRows) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlKey{}, d.SQL)
}

func (c *mandateRows) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	q, _ := ctx.Value(sqlKey{}).(string)
	if !strings.Contains(q, "FROM mandates") || !d.CommandTag.Select() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.max = max(c.max, d.CommandTag.RowsAffected())
}

func (c *mandateRows) reset() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.max
	c.max = 0
	return n
}

// ListMandates reads a page, not the owner's every mandate: the ledger
// returns at most page_size+1 rows, page_size is clamped to 100, and paging
// through (with each filter) returns every mandate exactly once.
func TestListMandatesReadsOnlyAPage(t *testing.T) {
	rows := &mandateRows{}
	store, err := ledger.Open(context.Background(), pgtest.NewDatabase(t), ledger.Options{Tracer: rows})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	s := NewOwnerServer(store, func(ctx context.Context) (string, error) {
		o, _ := ctx.Value(ownerKey{}).(string)
		if o == "" {
			return "", errors.New("no owner")
		}
		return o, nil
	})
	ctx := as("own_p")
	var agents []string
	for i := range 2 {
		a, err := s.CreateAgent(ctx, &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: fmt.Sprint("bot ", i)}})
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a.GetAgent().GetAgentId())
	}
	for _, acct := range []string{"acct_p1", "acct_p2"} {
		if _, err := store.GrantRailAccount(context.Background(), acct, "own_p"); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().Truncate(time.Second)
	const total = 130
	type made struct{ agent, acct string }
	mandates := map[string]made{}
	var revoked []string
	for i := range total {
		m := &countersignv1.Mandate{Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: []string{"acct_p1", "acct_p2"}[i/2%2],
			AgentId: agents[i%2], Purpose: fmt.Sprintf("edition %d", i), ValidFrom: timestamppb.New(now), ValidUntil: timestamppb.New(now.Add(time.Hour)),
			Mode:   countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
			Grants: []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 5000, Currencies: []string{"USD"}}}}
		r, err := s.CreateMandate(ctx, &countersignv1.CreateMandateRequest{Mandate: m})
		if err != nil {
			t.Fatal(err)
		}
		mandates[r.GetMandateHash()] = made{m.GetAgentId(), m.GetRailAccount()}
		if i%5 == 0 {
			if _, err := s.RevokeMandate(ctx, &countersignv1.RevokeMandateRequest{MandateHash: r.GetMandateHash()}); err != nil {
				t.Fatal(err)
			}
			revoked = append(revoked, r.GetMandateHash())
		}
	}

	rows.reset()
	l, err := s.ListMandates(ctx, &countersignv1.ListMandatesRequest{PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.GetMandates()) != 1 || l.GetNextPageToken() == "" {
		t.Fatalf("page of 1: %d mandates, next %q", len(l.GetMandates()), l.GetNextPageToken())
	}
	if n := rows.reset(); n > 2 {
		t.Fatalf("a page of 1 read %d mandate rows (the owner has %d); want at most 2", n, total)
	}
	l, err = s.ListMandates(ctx, &countersignv1.ListMandatesRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.GetMandates()) != maxMandatePage || l.GetNextPageToken() == "" {
		t.Fatalf("page_size 1000: %d mandates, next %q; want %d (the cap) and a next page", len(l.GetMandates()), l.GetNextPageToken(), maxMandatePage)
	}
	if n := rows.reset(); n > maxMandatePage+1 {
		t.Fatalf("a clamped page read %d mandate rows; want at most %d", n, maxMandatePage+1)
	}

	isRevoked := map[string]bool{}
	for _, h := range revoked {
		isRevoked[h] = true
	}
	cases := []struct {
		name string
		req  *countersignv1.ListMandatesRequest
		keep func(hash string) bool
	}{
		{"all", &countersignv1.ListMandatesRequest{}, func(string) bool { return true }},
		{"agent", &countersignv1.ListMandatesRequest{AgentId: agents[1]}, func(h string) bool { return mandates[h].agent == agents[1] }},
		{"rail account", &countersignv1.ListMandatesRequest{RailAccount: "acct_p2"}, func(h string) bool { return mandates[h].acct == "acct_p2" }},
		{"active", &countersignv1.ListMandatesRequest{State: countersignv1.MandateState_MANDATE_STATE_ACTIVE}, func(h string) bool { return !isRevoked[h] }},
		{"revoked on an account", &countersignv1.ListMandatesRequest{State: countersignv1.MandateState_MANDATE_STATE_REVOKED, RailAccount: "acct_p1"},
			func(h string) bool { return isRevoked[h] && mandates[h].acct == "acct_p1" }},
	}
	for _, tc := range cases {
		for _, size := range []int32{7, 0, 1000} {
			t.Run(fmt.Sprintf("%s/page %d", tc.name, size), func(t *testing.T) {
				want := 0
				for h := range mandates {
					if tc.keep(h) {
						want++
					}
				}
				seen := map[string]bool{}
				var last *countersignv1.MandateRecord
				req := tc.req
				req.PageSize, req.PageToken = size, ""
				for range total + 1 {
					l, err := s.ListMandates(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					eff := size
					if eff == 0 {
						eff = defaultPage
					}
					if n := rows.reset(); n > int64(min(eff, maxMandatePage)+1) {
						t.Fatalf("page read %d rows", n)
					}
					for _, m := range l.GetMandates() {
						h := m.GetMandateHash()
						if seen[h] || !tc.keep(h) {
							t.Fatalf("mandate %s listed twice or against the filter", h)
						}
						if wantState := map[bool]countersignv1.MandateState{false: countersignv1.MandateState_MANDATE_STATE_ACTIVE,
							true: countersignv1.MandateState_MANDATE_STATE_REVOKED}[isRevoked[h]]; m.GetState() != wantState {
							t.Fatalf("mandate %s is %v, want %v", h, m.GetState(), wantState)
						}
						if last != nil && m.GetCreateTime().AsTime().After(last.GetCreateTime().AsTime()) {
							t.Fatalf("not newest first: %v after %v", m.GetCreateTime().AsTime(), last.GetCreateTime().AsTime())
						}
						seen[h], last = true, m
					}
					if req.PageToken = l.GetNextPageToken(); req.PageToken == "" {
						break
					}
				}
				if len(seen) != want {
					t.Fatalf("paged through %d mandates, want %d", len(seen), want)
				}
			})
		}
	}

	// A token is the owner's own: another owner's, or none at all, is refused.
	if _, err := s.ListMandates(as("own_q"), &countersignv1.ListMandatesRequest{PageToken: l.GetNextPageToken()}); code(err) != codes.InvalidArgument {
		t.Fatalf("another owner's page token: %v, want InvalidArgument", err)
	}
	if _, err := s.ListMandates(ctx, &countersignv1.ListMandatesRequest{PageToken: "bm90LWEtaGFzaA"}); code(err) != codes.InvalidArgument {
		t.Fatalf("a forged page token: %v, want InvalidArgument", err)
	}
}
