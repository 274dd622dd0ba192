package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// mandateDates are the first days of 2026's first four months.
func mandateDates() (jan1, feb1, mar1, apr1 time.Time) {
	d := func(m time.Month) time.Time { return time.Date(2026, m, 1, 0, 0, 0, 0, time.UTC) }
	return d(1), d(2), d(3), d(4)
}

// testMandate builds a record whose canonical bytes carry its own columns,
// as internal/mandate would produce them. The ledger never reads the policy
// itself, so a small document is enough.
func testMandate(t *testing.T, agentID, railAccount string, from, until time.Time, purpose string) MandateRecord {
	t.Helper()
	doc := map[string]any{ // encoding/json sorts map keys, as RFC 8785 does
		"agent_id": agentID, "rail_account": railAccount, "rail": "RAIL_STRIPE",
		"mode": "MANDATE_MODE_BUDGETED", "purpose": purpose,
		"valid_from": from.UTC().Format(time.RFC3339), "valid_until": until.UTC().Format(time.RFC3339),
	}
	c, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c)
	return MandateRecord{
		Hash: hex.EncodeToString(sum[:]), AgentID: agentID, RailAccount: railAccount, Canonical: c,
		Mode: MandateModeBudgeted, ValidFrom: from, ValidUntil: until,
	}
}

// createMandateAgent creates an agent of owner, and grants owner the rail
// accounts the mandate tests use (a mandate needs its owner to hold its
// account).
func createMandateAgent(t *testing.T, s *Store, owner string) Agent {
	t.Helper()
	a, err := s.CreateAgent(context.Background(), owner, "mandate test")
	if err != nil {
		t.Fatal(err)
	}
	for _, acct := range []string{"acct_1", "acct_2"} {
		if _, err := s.GrantRailAccount(context.Background(), acct, owner); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func mustCreateMandate(t *testing.T, s *Store, m MandateRecord) {
	t.Helper()
	created, err := s.CreateMandate(context.Background(), m)
	if err != nil || !created {
		t.Fatalf("CreateMandate = %v, %v; want created", created, err)
	}
}

func TestCreateMandateIsIdempotentOnTheHash(t *testing.T) {
	jan1, feb1, _, apr1 := mandateDates()
	s := openTest(t)
	ctx := context.Background()
	a := createMandateAgent(t, s, "own_1")
	m := testMandate(t, a.ID, "acct_1", jan1, apr1, "refunds")
	mustCreateMandate(t, s, m)
	created, err := s.CreateMandate(ctx, m)
	if err != nil || created {
		t.Fatalf("second CreateMandate = %v, %v; want not created, no error", created, err)
	}
	got, err := s.GetMandate(ctx, m.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if got.OwnerID != "own_1" || got.AgentID != a.ID || got.RailAccount != "acct_1" || string(got.Canonical) != string(m.Canonical) ||
		got.Mode != MandateModeBudgeted || !got.ValidFrom.Equal(jan1) || !got.ValidUntil.Equal(apr1) ||
		got.CreatedAt.IsZero() || got.RevokedAt != nil || got.RevokeReason != "" {
		t.Fatalf("GetMandate = %+v", got)
	}
	if !got.ActiveAt(feb1) || got.ActiveAt(apr1) || got.ActiveAt(jan1.Add(-time.Second)) {
		t.Error("ActiveAt disagrees with the validity window")
	}
	list, err := s.ListMandates(ctx, "own_1", "")
	if err != nil || len(list) != 1 {
		t.Fatalf("ListMandates = %v, %v; want the one mandate", list, err)
	}
}

func TestCreateMandateNeedsTheOwnersActiveAgent(t *testing.T) {
	jan1, _, _, apr1 := mandateDates()
	s := openTest(t)
	ctx := context.Background()
	a := createMandateAgent(t, s, "own_1")
	revoked := createMandateAgent(t, s, "own_1")
	if err := s.RevokeAgent(ctx, revoked.ID); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		m       MandateRecord
		owner   string
		wantErr error
	}{
		{"unknown agent", testMandate(t, "agt_doesnotexist", "acct_1", jan1, apr1, "x"), "", ErrNotFound},
		{"revoked agent", testMandate(t, revoked.ID, "acct_1", jan1, apr1, "x"), "", ErrNotFound},
		{"another owner's agent", testMandate(t, a.ID, "acct_1", jan1, apr1, "x"), "own_2", ErrNotFound},
		{"the owner's agent", testMandate(t, a.ID, "acct_1", jan1, apr1, "y"), "own_1", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.m.OwnerID = tc.owner
			created, err := s.CreateMandate(ctx, tc.m)
			if !errors.Is(err, tc.wantErr) || created != (tc.wantErr == nil) {
				t.Fatalf("CreateMandate = %v, %v; want error %v", created, err, tc.wantErr)
			}
		})
	}
	t.Run("malformed hash", func(t *testing.T) {
		m := testMandate(t, a.ID, "acct_1", jan1, apr1, "z")
		m.Hash = "ABC"
		if _, err := s.CreateMandate(ctx, m); err == nil {
			t.Fatal("CreateMandate accepted a malformed hash")
		}
	})
}

func mandatePGCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// TestMandateImmutableInTheDatabase goes around the Store: the database
// itself refuses to change or remove a mandate's policy.
func TestMandateImmutableInTheDatabase(t *testing.T) {
	jan1, _, _, apr1 := mandateDates()
	s := openTest(t)
	ctx := context.Background()
	a := createMandateAgent(t, s, "own_1")
	other := createMandateAgent(t, s, "own_1")
	m := testMandate(t, a.ID, "acct_1", jan1, apr1, "refunds")
	mustCreateMandate(t, s, m)
	const (
		refused   = "42501" // insufficient_privilege
		violation = "23514" // check_violation
	)
	cases := []struct {
		name string
		sql  string
		args []any
		code string
	}{
		{"change the canonical policy", `UPDATE mandates SET canonical = canonical || ' ' WHERE hash = $1`, nil, refused},
		{"change the hash", `UPDATE mandates SET hash = repeat('0', 64) WHERE hash = $1`, nil, refused},
		{"widen the validity", `UPDATE mandates SET valid_until = valid_until + interval '1 year' WHERE hash = $1`, nil, refused},
		{"move it to another agent", `UPDATE mandates SET agent_id = $2 WHERE hash = $1`, []any{other.ID}, refused},
		{"move it to another rail account", `UPDATE mandates SET rail_account = 'acct_2' WHERE hash = $1`, nil, refused},
		{"change the mode", `UPDATE mandates SET mode = 'approval_required' WHERE hash = $1`, nil, refused},
		{"change the owner", `UPDATE mandates SET owner_id = 'own_2' WHERE hash = $1`, nil, refused},
		{"backdate it", `UPDATE mandates SET created_at = created_at - interval '1 day' WHERE hash = $1`, nil, refused},
		{"delete it", `DELETE FROM mandates WHERE hash = $1`, nil, refused},
		{"revoke without a reason", `UPDATE mandates SET revoked_at = now() WHERE hash = $1`, nil, violation},
		{"a reason without revoking", `UPDATE mandates SET revoke_reason = 'x' WHERE hash = $1`, nil, violation},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.pool.Exec(ctx, tc.sql, append([]any{m.Hash}, tc.args...)...)
			if got := mandatePGCode(err); got != tc.code {
				t.Fatalf("err = %v (code %q), want code %s", err, got, tc.code)
			}
		})
	}
	t.Run("truncate", func(t *testing.T) {
		if _, err := s.pool.Exec(ctx, `TRUNCATE mandates`); mandatePGCode(err) != refused {
			t.Fatalf("TRUNCATE = %v, want refused", err)
		}
	})
	got, err := s.GetMandate(ctx, m.Hash)
	if err != nil || string(got.Canonical) != string(m.Canonical) || got.RevokedAt != nil {
		t.Fatalf("mandate after the attempts = %+v, %v; want it unchanged", got, err)
	}
}

func TestMandateInsertGuards(t *testing.T) {
	jan1, _, _, apr1 := mandateDates()
	s := openTest(t)
	ctx := context.Background()
	a := createMandateAgent(t, s, "own_1")
	good := testMandate(t, a.ID, "acct_1", jan1, apr1, "refunds")
	insert := func(m MandateRecord, owner string, revoked bool) error {
		var revokedAt *time.Time
		var reason *string
		if revoked {
			now, r := time.Now(), "x"
			revokedAt, reason = &now, &r
		}
		_, err := s.pool.Exec(ctx, `INSERT INTO mandates (hash, owner_id, agent_id, rail_account, canonical, mode,
			valid_from, valid_until, revoked_at, revoke_reason) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)`,
			m.Hash, owner, m.AgentID, m.RailAccount, string(m.Canonical), m.Mode, m.ValidFrom, m.ValidUntil, revokedAt, reason)
		return err
	}
	cases := []struct {
		name    string
		change  func(*MandateRecord)
		owner   string
		revoked bool
		code    string
	}{
		{"hash of other bytes", func(m *MandateRecord) { m.Hash = testMandate(t, a.ID, "acct_1", jan1, apr1, "other").Hash }, "own_1", false, "23514"},
		{"rail account not the document's", func(m *MandateRecord) { m.RailAccount = "acct_2" }, "own_1", false, "23514"},
		{"validity not the document's", func(m *MandateRecord) { m.ValidUntil = m.ValidUntil.Add(time.Hour) }, "own_1", false, "23514"},
		{"mode not the document's", func(m *MandateRecord) { m.Mode = MandateModeApprovalRequired }, "own_1", false, "23514"},
		{"owner does not own the agent", func(*MandateRecord) {}, "own_2", false, "23503"},
		{"born revoked", func(*MandateRecord) {}, "own_1", true, "23514"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := good
			tc.change(&m)
			if err := insert(m, tc.owner, tc.revoked); mandatePGCode(err) != tc.code {
				t.Fatalf("insert = %v, want code %s", err, tc.code)
			}
		})
	}
	if err := insert(good, "own_1", false); err != nil {
		t.Fatalf("the consistent row was refused: %v", err)
	}
}

func TestRevokeMandateIsOneWay(t *testing.T) {
	jan1, feb1, _, apr1 := mandateDates()
	s := openTest(t)
	ctx := context.Background()
	a := createMandateAgent(t, s, "own_1")
	m := testMandate(t, a.ID, "acct_1", jan1, apr1, "refunds")
	mustCreateMandate(t, s, m)

	if _, err := s.RevokeMandate(ctx, m.Hash, "  "); err == nil {
		t.Fatal("RevokeMandate without a reason succeeded")
	}
	if revoked, err := s.RevokeMandate(ctx, m.Hash, "agent misbehaved"); err != nil || !revoked {
		t.Fatalf("RevokeMandate = %v, %v; want revoked", revoked, err)
	}
	if revoked, err := s.RevokeMandate(ctx, m.Hash, "second thoughts"); err != nil || revoked {
		t.Fatalf("second RevokeMandate = %v, %v; want already revoked, no error", revoked, err)
	}
	got, err := s.GetMandate(ctx, m.Hash)
	if err != nil || got.RevokedAt == nil || got.RevokeReason != "agent misbehaved" {
		t.Fatalf("GetMandate = %+v, %v; want revoked with the first reason", got, err)
	}
	if got.ActiveAt(feb1) {
		t.Error("a revoked mandate is active")
	}
	// Applying the same mandate again does not bring it back.
	if created, err := s.CreateMandate(ctx, m); err != nil || created {
		t.Fatalf("CreateMandate of a revoked mandate = %v, %v", created, err)
	}
	if again, _ := s.GetMandate(ctx, m.Hash); again.RevokedAt == nil {
		t.Fatal("re-creating un-revoked the mandate")
	}
	for name, sql := range map[string]string{
		"un-revoke":         `UPDATE mandates SET revoked_at = NULL, revoke_reason = NULL WHERE hash = $1`,
		"move revoked_at":   `UPDATE mandates SET revoked_at = revoked_at + interval '1 day' WHERE hash = $1`,
		"rewrite reason":    `UPDATE mandates SET revoke_reason = 'nothing happened' WHERE hash = $1`,
		"revoke it again":   `UPDATE mandates SET revoked_at = now(), revoke_reason = 'again' WHERE hash = $1`,
		"delete it instead": `DELETE FROM mandates WHERE hash = $1`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := s.pool.Exec(ctx, sql, m.Hash); mandatePGCode(err) == "" {
				t.Fatalf("%s = %v, want the database to refuse", name, err)
			}
		})
	}
	if _, err := s.RevokeMandate(ctx, "0000000000000000000000000000000000000000000000000000000000000000", "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RevokeMandate(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.GetMandate(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetMandate(unknown) = %v, want ErrNotFound", err)
	}
}

func TestActiveMandate(t *testing.T) {
	jan1, feb1, mar1, apr1 := mandateDates()
	s := openTest(t)
	ctx := context.Background()
	a := createMandateAgent(t, s, "own_1")
	b := createMandateAgent(t, s, "own_2")
	// Created in this order; later is newer.
	q1 := testMandate(t, a.ID, "acct_1", jan1, apr1, "first quarter")
	feb := testMandate(t, a.ID, "acct_1", feb1, mar1, "february, narrower")
	acct2 := testMandate(t, a.ID, "acct_2", jan1, apr1, "other account")
	otherAgent := testMandate(t, b.ID, "acct_1", jan1, apr1, "other agent")
	for _, m := range []MandateRecord{q1, feb, acct2, otherAgent} {
		mustCreateMandate(t, s, m)
	}
	type query struct {
		name    string
		agent   string
		account string
		at      time.Time
		want    string // hash; "" means ErrNotFound
	}
	check := func(t *testing.T, cases []query) {
		t.Helper()
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.ActiveMandate(ctx, tc.agent, tc.account, tc.at)
				var inTx MandateRecord
				txErr := s.InTx(ctx, func(tx *Tx) error {
					var err error
					inTx, err = tx.ActiveMandate(ctx, tc.agent, tc.account, tc.at)
					if errors.Is(err, ErrNotFound) {
						return nil
					}
					return err
				})
				if txErr != nil {
					t.Fatalf("Tx.ActiveMandate: %v", txErr)
				}
				if inTx.Hash != got.Hash {
					t.Errorf("Tx.ActiveMandate = %s, Store.ActiveMandate = %s", inTx.Hash, got.Hash)
				}
				if tc.want == "" {
					if !errors.Is(err, ErrNotFound) {
						t.Fatalf("ActiveMandate = %+v, %v; want ErrNotFound", got, err)
					}
					return
				}
				if err != nil || got.Hash != tc.want {
					t.Fatalf("ActiveMandate = %s, %v; want %s", got.Hash, err, tc.want)
				}
			})
		}
	}
	mid := func(t time.Time) time.Time { return t.Add(14 * 24 * time.Hour) }
	check(t, []query{
		{"before any validity", a.ID, "acct_1", jan1.Add(-time.Microsecond), ""},
		{"valid_from is inclusive", a.ID, "acct_1", jan1, q1.Hash},
		{"only the quarter covers January", a.ID, "acct_1", mid(jan1), q1.Hash},
		{"the newer mandate wins where both are valid", a.ID, "acct_1", mid(feb1), feb.Hash},
		{"valid_until is exclusive", a.ID, "acct_1", mar1, q1.Hash},
		{"after every validity", a.ID, "acct_1", apr1, ""},
		{"per rail account", a.ID, "acct_2", mid(feb1), acct2.Hash},
		{"per agent", b.ID, "acct_1", mid(feb1), otherAgent.Hash},
		{"unknown rail account", a.ID, "acct_9", mid(feb1), ""},
	})
	if _, err := s.RevokeMandate(ctx, feb.Hash, "too wide"); err != nil {
		t.Fatal(err)
	}
	t.Run("after revoking the newer", func(t *testing.T) {
		check(t, []query{{"the older one again", a.ID, "acct_1", mid(feb1), q1.Hash}})
	})
	if _, err := s.RevokeMandate(ctx, q1.Hash, "agent retired"); err != nil {
		t.Fatal(err)
	}
	t.Run("after revoking both", func(t *testing.T) {
		check(t, []query{
			{"none", a.ID, "acct_1", mid(feb1), ""},
			{"the other account is untouched", a.ID, "acct_2", mid(feb1), acct2.Hash},
		})
	})
	list, err := s.ListMandates(ctx, "", a.ID)
	if err != nil || len(list) != 3 || list[0].Hash != acct2.Hash || list[2].Hash != q1.Hash {
		t.Fatalf("ListMandates(agent) = %d mandates, %v; want 3, newest first", len(list), err)
	}
	if list, err := s.ListMandates(ctx, "own_2", ""); err != nil || len(list) != 1 || list[0].Hash != otherAgent.Hash {
		t.Fatalf("ListMandates(owner) = %v, %v", list, err)
	}
}

// TestRevokeMandateWaitsForADecisionInFlight: a deciding transaction that read the
// mandate as active holds it until it commits, so the revocation lands
// after that decision and before any later one.
func TestRevokeMandateWaitsForADecisionInFlight(t *testing.T) {
	jan1, feb1, _, apr1 := mandateDates()
	s := openTest(t)
	ctx := context.Background()
	a := createMandateAgent(t, s, "own_1")
	m := testMandate(t, a.ID, "acct_1", jan1, apr1, "refunds")
	mustCreateMandate(t, s, m)

	done := make(chan error, 1)
	err := s.InTx(ctx, func(tx *Tx) error {
		if _, err := tx.ActiveMandate(ctx, a.ID, "acct_1", feb1); err != nil {
			return err
		}
		go func() {
			_, err := s.RevokeMandate(ctx, m.Hash, "stop")
			done <- err
		}()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var waiting int
			if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
				return err
			}
			if waiting > 0 {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("RevokeMandate finished (%v) while a decision held the mandate", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("RevokeMandate never waited on the decision's lock")
			}
			time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RevokeMandate: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RevokeMandate did not finish after the decision committed")
	}
	if _, err := s.ActiveMandate(ctx, a.ID, "acct_1", feb1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ActiveMandate after revoke = %v, want ErrNotFound", err)
	}
}
