package ledger

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// OwnerTransitionPositions pages by (at_micros, id): records that share a
// timestamp, and records whose ids run against their timestamps (a
// transaction that began earlier committed later), each come back once,
// in order, across pages of any size; OwnerTransitions reads in full only
// the records asked for, and only the owner's.
func TestOwnerTransitionPositionsPageByTimeThenID(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	mine, err := s.CreateAgent(ctx, "own_p", "bot")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := s.CreateAgent(ctx, "own_q", "bot")
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := proposal(1), proposal(2)
	p1.AgentID, p2.AgentID = mine.ID, theirs.ID
	for _, p := range []testProposal{p1, p2} {
		if _, err := startFirst(ctx, s, p); err != nil {
			t.Fatal(err)
		}
	}
	// Records at chosen times, far before the ones just written: three
	// sharing one timestamp, then two whose ids run against time.
	const base = int64(1_000_000_000_000)
	for _, at := range []int64{base + 10, base + 10, base + 10, base + 30, base + 20} {
		for _, p := range []testProposal{p1, p2} {
			if _, err := s.pool.Exec(ctx, `INSERT INTO audit_records (rail_account, sik, from_state, to_state, event, attempt_seq, detail, at_micros)
				VALUES ($1, $2, 'IN_FLIGHT', 'UNKNOWN', 'RAIL_AMBIGUOUS', 1, 'test', $3)`, p.RailAccount, p.SIK, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	all, err := s.OwnerTransitionPositions(ctx, "own_p", IntentFilter{}, TransitionPos{AtMicros: base}, 100)
	if err != nil {
		t.Fatal(err)
	}
	// Five chosen records and intent 1's three (PROPOSED, AUTHORIZED, IN_FLIGHT).
	if len(all) != 8 {
		t.Fatalf("%d positions, want 8: %v", len(all), all)
	}
	if !slices.IsSortedFunc(all, func(a, b TransitionPos) int {
		if a.AtMicros != b.AtMicros {
			return int(a.AtMicros - b.AtMicros)
		}
		return int(a.ID - b.ID)
	}) || all[3].AtMicros != base+20 || all[3].ID < all[4].ID {
		t.Fatalf("positions out of (at_micros, id) order: %v", all)
	}
	for _, size := range []int{1, 2, 4} {
		var paged []TransitionPos
		after := TransitionPos{AtMicros: base}
		for range 10 {
			ps, err := s.OwnerTransitionPositions(ctx, "own_p", IntentFilter{}, after, size)
			if err != nil {
				t.Fatal(err)
			}
			paged = append(paged, ps...)
			if len(ps) < size {
				break
			}
			after = ps[len(ps)-1]
		}
		if !slices.Equal(paged, all) {
			t.Fatalf("pages of %d: %v, want %v", size, paged, all)
		}
	}
	if ps, err := s.OwnerTransitionPositions(ctx, "own_p", IntentFilter{States: []string{"IN_FLIGHT"}}, TransitionPos{AtMicros: base}, 100); err != nil || len(ps) != 1 {
		t.Fatalf("IN_FLIGHT only: %v, %v", ps, err)
	}

	ids := []int64{all[4].ID, all[0].ID}
	trs, err := s.OwnerTransitions(ctx, "own_p", ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(trs) != 2 || trs[0].ID != all[0].ID || trs[1].ID != all[4].ID {
		t.Fatalf("transitions %+v, want records %v in order", trs, []int64{all[0].ID, all[4].ID})
	}
	for _, tr := range trs {
		if tr.Intent.Key != p1.Key || tr.Intent.AgentID != mine.ID || tr.SIK != p1.SIK || tr.Detail != "test" {
			t.Fatalf("transition %+v: not intent 1's record with its intent", tr)
		}
	}
	if trs, err := s.OwnerTransitions(ctx, "own_q", ids); err != nil || len(trs) != 0 {
		t.Fatalf("another owner reads the records: %v, %v", trs, err)
	}
}

// Text the database cannot store (a NUL byte) is the caller's invalid
// input, ErrInvalidText, not an internal failure.
func TestNULTextIsInvalidInput(t *testing.T) {
	s := openTest(t)
	_, err := s.CreateAgent(context.Background(), "own_n", "bot\x00")
	if !errors.Is(err, ErrInvalidText) {
		t.Fatalf("CreateAgent with a NUL in its name: %v, want ErrInvalidText", err)
	}
	if _, err := s.OwnerIntents(context.Background(), "own_n", IntentFilter{RailAccount: "acct\x00"}, nil, 10); !errors.Is(err, ErrInvalidText) {
		t.Fatalf("a filter with a NUL: %v, want ErrInvalidText", err)
	}
}
