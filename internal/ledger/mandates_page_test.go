package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// OwnerMandates pages an owner's mandates in SQL: newest first, ties on
// created_at broken by hash, each filter applied before the limit, every
// mandate on exactly one page, never another owner's.
func TestOwnerMandatesPagesInSQL(t *testing.T) {
	jan1, _, _, apr1 := mandateDates()
	s := openTest(t)
	ctx := context.Background()
	a := createMandateAgent(t, s, "own_1")
	b, err := s.CreateAgent(ctx, "own_1", "second agent")
	if err != nil {
		t.Fatal(err)
	}
	other := createMandateAgent(t, s, "own_2")
	agents := []string{a.ID, b.ID}
	accts := []string{"acct_1", "acct_2"}
	// Twelve mandates in one transaction share created_at (now()): their
	// order is the hash's alone.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		m := testMandate(t, agents[i%2], accts[i/2%2], jan1, apr1, fmt.Sprintf("tied %d", i))
		if _, err := tx.Exec(ctx, `INSERT INTO mandates (hash, owner_id, agent_id, rail_account, canonical, mode, valid_from, valid_until)
			VALUES ($1, 'own_1', $2, $3, $4, $5, $6, $7)`, m.Hash, m.AgentID, m.RailAccount, string(m.Canonical), m.Mode, m.ValidFrom, m.ValidUntil); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var hashes []string
	for i := range 9 {
		m := testMandate(t, agents[i%2], accts[i/3%2], jan1, apr1, fmt.Sprintf("apart %d", i))
		mustCreateMandate(t, s, m)
		hashes = append(hashes, m.Hash)
	}
	for _, h := range hashes[:4] {
		if _, err := s.RevokeMandate(ctx, h, "test"); err != nil {
			t.Fatal(err)
		}
	}
	theirs := testMandate(t, other.ID, "acct_1", jan1, apr1, "another owner's")
	mustCreateMandate(t, s, theirs)

	// What every page together must be: the unpaged list, filtered.
	all, err := s.ListMandates(ctx, "own_1", "")
	if err != nil || len(all) != 21 {
		t.Fatalf("ListMandates = %d, %v; want 21", len(all), err)
	}
	yes, no := true, false
	filters := []struct {
		name string
		f    MandateFilter
	}{
		{"all", MandateFilter{}},
		{"agent", MandateFilter{AgentID: b.ID}},
		{"rail account", MandateFilter{RailAccount: "acct_2"}},
		{"revoked", MandateFilter{Revoked: &yes}},
		{"unrevoked", MandateFilter{Revoked: &no}},
		{"agent, account and unrevoked", MandateFilter{AgentID: a.ID, RailAccount: "acct_1", Revoked: &no}},
		{"another owner's agent", MandateFilter{AgentID: other.ID}},
	}
	for _, fc := range filters {
		var want []string
		for _, r := range all {
			if (fc.f.AgentID == "" || r.AgentID == fc.f.AgentID) && (fc.f.RailAccount == "" || r.RailAccount == fc.f.RailAccount) &&
				(fc.f.Revoked == nil || *fc.f.Revoked == (r.RevokedAt != nil)) {
				want = append(want, r.Hash)
			}
		}
		for _, limit := range []int{1, 2, 5, 100} {
			t.Run(fmt.Sprintf("%s/limit %d", fc.name, limit), func(t *testing.T) {
				var got []string
				after := ""
				for range 100 {
					page, err := s.OwnerMandates(ctx, "own_1", fc.f, after, limit)
					if err != nil {
						t.Fatal(err)
					}
					if len(page) > limit {
						t.Fatalf("read %d rows for a limit of %d", len(page), limit)
					}
					for _, r := range page {
						got = append(got, r.Hash)
					}
					if len(page) < limit {
						break
					}
					after = page[len(page)-1].Hash
				}
				if !slices.Equal(got, want) {
					t.Fatalf("paged %d mandates %v,\nwant %d %v", len(got), got, len(want), want)
				}
			})
		}
	}
	// Another owner's mandate is no cursor (nor is a hash of none).
	for _, after := range []string{theirs.Hash, "00" + theirs.Hash[2:]} {
		if _, err := s.OwnerMandates(ctx, "own_1", MandateFilter{}, after, 10); !errors.Is(err, ErrNotFound) {
			t.Fatalf("page after %s: %v, want ErrNotFound", after, err)
		}
	}
	for _, limit := range []int{0, -1, MaxMandatePage + 1} {
		if _, err := s.OwnerMandates(ctx, "own_1", MandateFilter{}, "", limit); err == nil {
			t.Fatalf("limit %d accepted", limit)
		}
	}
	if _, err := s.OwnerMandates(ctx, "", MandateFilter{}, "", 10); err == nil {
		t.Fatal("no owner accepted")
	}
}
