package ledger

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// rowCheck is one condition migration 00042 moved from a CHECK constraint
// into its table's <table>_zz_checks trigger: a row that breaks it and
// nothing else (set is the base row's columns it changes).
type rowCheck struct {
	table, name string
	set         map[string]string
}

const (
	checkSIK   = "'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'"
	checkAlias = "'BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB'"
	hash32     = `'\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'::bytea`
	hash31     = `'\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e'::bytea`
)

// checkBase is a row of each table that every check admits, as SQL
// literals by column.
var checkBase = map[string]map[string]string{
	"intents": {"rail_account": "'acct_1'", "sik": checkSIK, "state": "'PROPOSED'", "last_event": "'PROPOSED'", "rail": "'stripe'",
		"action": "'refund'", "subject": "'pi_1'", "amount_minor": "100", "currency": "'USD'", "canonical": "'{}'", "family": checkSIK},
	"attempts": {"rail_account": "'acct_1'", "sik": checkSIK, "attempt_seq": "1", "stamp": "'stamp_1'", "stamp_generation": "0",
		"lease_owner": "'test'", "lease_expires_at": "now()"},
	"decisions": {"request_id": "'req'", "source": "'decide'", "verdict": "'BLOCK'", "reason_code": "'scope'", "reason": "'r'"},
	"audit_records": {"rail_account": "'acct_1'", "sik": checkSIK, "from_state": "''", "to_state": "'PROPOSED'", "event": "'PROPOSED'",
		"attempt_seq": "0", "detail": "''", "at_micros": "1"},
	"budget_holds": {"rail_account": "'acct_1'", "sik": checkSIK, "hold_seq": "1", "mandate_hash": "'m'", "agent_id": "'agt_1'",
		"payee_key": "''", "subject": "'pi_1'", "currency": "'USD'", "amount_minor": "1", "budgeted": "false"},
	"window_buckets": {"mandate_hash": "'m'", "by_payee": "false", "key": "'agt_1'", "bucket": "'infinity'", "currency": "'USD'",
		"calls": "0", "amount_minor": "0", "shard": "0"},
	"mandate_budgets": {"mandate_hash": "'m'", "currency": "'USD'", "budget_minor": "10", "reserved_minor": "0", "overrun_minor": "0"},
	"intent_aliases":  {"rail_account": "'acct_1'", "alias": checkAlias, "sik": checkSIK},
}

var rowChecks = []rowCheck{
	{"intents", "intents_state_known", map[string]string{"state": "'SENT'"}},
	{"intents", "intents_check1", map[string]string{"state": "'IN_FLIGHT'"}},
	{"intents", "intents_subject_check", map[string]string{"subject": "''"}},
	{"intents", "intents_rail_account_check", map[string]string{"rail_account": "repeat('a', 129)"}},
	{"intents", "intents_check", map[string]string{"state": "'APPLIED'", "attempt_count": "1"}},
	{"intents", "intents_check2", map[string]string{"state": "'UNKNOWN'", "attempt_count": "1"}},
	{"intents", "intents_action_check", map[string]string{"action": "'charge'"}},
	{"intents", "intents_rail_check", map[string]string{"rail": "'paypal'"}},
	{"intents", "intents_stamp_generation_check", map[string]string{"stamp_generation": "46656"}},
	{"intents", "intents_sik_check", map[string]string{"sik": "'AAAA'"}},
	{"intents", "intents_family_check", map[string]string{"family": "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'"}},
	{"intents", "intents_currency_check", map[string]string{"currency": "'usd'"}},
	{"intents", "intents_attempt_count_check", map[string]string{"attempt_count": "-1"}},
	{"intents", "intents_reconcile_count_check", map[string]string{"reconcile_count": "-1"}},
	{"intents", "intents_amount_minor_check", map[string]string{"amount_minor": "-1"}},

	{"attempts", "attempts_outcome_check", map[string]string{"outcome": "'maybe'"}},
	{"attempts", "attempts_stamp_check", map[string]string{"stamp": "'abc'"}},
	{"attempts", "attempts_commit_token_hash_check", map[string]string{"commit_token_hash": hash31}},
	{"attempts", "attempts_check", map[string]string{"outcome": "'applied'"}},
	{"attempts", "attempts_fee_minor_check", map[string]string{"fee_minor": "-1"}},
	{"attempts", "attempts_commit_agent_has_token", map[string]string{"commit_agent": "'agt_1'"}},
	{"attempts", "attempts_attempt_seq_check", map[string]string{"attempt_seq": "0"}},
	{"attempts", "attempts_stamped_or_not", map[string]string{"body_stamped": "true", "left_unstamped": "true"}},

	{"decisions", "decisions_verdict_check", map[string]string{"verdict": "'MAYBE'"}},
	{"decisions", "decisions_source_check", map[string]string{"source": "'console'"}},
	{"decisions", "decisions_gates_check", map[string]string{"gates": "'{}'::jsonb"}},
	{"decisions", "decisions_intent", map[string]string{"rail_account": "'acct_1'"}},
	{"decisions", "decisions_reason_code_check", map[string]string{"reason_code": "'Scope'"}},
	{"decisions", "decisions_check", map[string]string{"credential_id": "'crd_1'"}},

	{"audit_records", "audit_records_legacy_chain", map[string]string{"chain": "'c'"}},
	{"audit_records", "audit_records_hash_check", map[string]string{"chain": "'c'", "seq": "1", "prev_hash": hash32, "hash": hash31}},
	{"audit_records", "audit_records_prev_hash_check", map[string]string{"chain": "'c'", "seq": "1", "prev_hash": hash31, "hash": hash32}},
	{"audit_records", "audit_records_leaf_index_check", map[string]string{"leaf_index": "-1"}},
	{"audit_records", "audit_records_seq_check", map[string]string{"chain": "'c'", "seq": "0", "prev_hash": hash32, "hash": hash32}},

	{"budget_holds", "budget_holds_state_check", map[string]string{"state": "'spent'", "settled_at": "now()"}},
	{"budget_holds", "budget_holds_check", map[string]string{"state": "'posted'"}},
	{"budget_holds", "budget_holds_currency_check", map[string]string{"currency": "'usd'"}},
	{"budget_holds", "budget_holds_amount_minor_check", map[string]string{"amount_minor": "-1"}},
	{"budget_holds", "budget_holds_hold_seq_check", map[string]string{"hold_seq": "0"}},

	{"window_buckets", "window_buckets_shard_check", map[string]string{"shard": "16"}},
	{"window_buckets", "window_buckets_bucket_check", map[string]string{"bucket": "'2026-03-08 09:00:30+00'"}},
	{"window_buckets", "window_buckets_amount_minor_check", map[string]string{"amount_minor": "-1"}},
	{"window_buckets", "window_buckets_calls_check", map[string]string{"calls": "-1"}},

	{"mandate_budgets", "budget_never_exceeded", map[string]string{"reserved_minor": "20"}},
	{"mandate_budgets", "mandate_budgets_currency_check", map[string]string{"currency": "'usd'"}},
	{"mandate_budgets", "mandate_budgets_held_minor_check", map[string]string{"reserved_minor": "-1"}},
	{"mandate_budgets", "mandate_budgets_budget_minor_check", map[string]string{"budget_minor": "0"}},

	{"intent_aliases", "intent_aliases_alias_check", map[string]string{"alias": "'abc'"}},
}

// insertSQL is the base row of table with set's columns changed.
func insertSQL(table string, set map[string]string) string {
	row := maps.Clone(checkBase[table])
	maps.Copy(row, set)
	cols := slices.Sorted(maps.Keys(row))
	vals := make([]string, len(cols))
	for i, c := range cols {
		vals[i] = row[c]
	}
	return "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")"
}

// refusal inserts table's base row (which must pass) and then the row set
// changes, under the replica role (no trigger but the checks, no foreign
// key in the way), in a transaction rolled back; it returns the second
// insert's constraint violation ("" when it was admitted).
func refusal(t *testing.T, c *pgx.Conn, table string, set map[string]string) string {
	t.Helper()
	return afterBaseRow(t, c, table, set, `ROLLBACK TO SAVEPOINT base`, insertSQL(table, set))
}

// updateRefusal is refusal for an UPDATE: the base row inserted, then
// updated to the row set changes.
func updateRefusal(t *testing.T, c *pgx.Conn, table string, set map[string]string) string {
	t.Helper()
	sets := make([]string, 0, len(set))
	for _, col := range slices.Sorted(maps.Keys(set)) {
		sets = append(sets, col+" = "+set[col])
	}
	return afterBaseRow(t, c, table, set, `SELECT 1`, "UPDATE "+table+" SET "+strings.Join(sets, ", "))
}

// afterBaseRow inserts table's base row (which must pass) in a transaction
// under the replica role, rolled back at the end; runs then, and then
// write (of the row set changes); and returns write's check violation.
func afterBaseRow(t *testing.T, c *pgx.Conn, table string, set map[string]string, then, write string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// Replica role fires neither the guards nor the foreign keys' triggers
	// (a logical replication subscriber's role), but CHECK constraints still
	// hold, and so must the checks' triggers, which are ENABLE ALWAYS.
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SAVEPOINT base`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, insertSQL(table, nil)); err != nil {
		t.Fatalf("%s: the base row is refused: %v", table, err)
	}
	if _, err := tx.Exec(ctx, then); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, write)
	return violated(t, table, set, err)
}

// violated is err's check constraint ("" for no error).
func violated(t *testing.T, table string, set map[string]string, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Fatalf("%s %v: %v, want a check violation", table, set, err)
	}
	return pgErr.ConstraintName
}

// TestRowChecksRefuseWhatTheConstraintsDid: migration 00042's triggers
// refuse each row the CHECK constraints they replace refused, naming the
// same constraint with the same SQLSTATE (ledger code matches on both, e.g.
// budget_never_exceeded), and admit what they admitted, under the replica
// role as the constraints did (found by a review), on INSERT and on UPDATE
// (migration 00044 checks the rows decisions update after the update); no
// CHECK constraint is left on those tables, and Down puts every one back.
func TestRowChecksRefuseWhatTheConstraintsDid(t *testing.T) {
	ctx := context.Background()
	url, p, _ := migrationTest(t)
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	tables := slices.Sorted(maps.Keys(checkBase))
	checksOn := func() []string {
		rows, err := c.Query(ctx, `SELECT conname FROM pg_constraint WHERE contype = 'c' AND conrelid::regclass::text = ANY ($1)`, tables)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(names)
		return names
	}
	if left := checksOn(); len(left) != 0 {
		t.Fatalf("CHECK constraints left on the decision's tables: %v", left)
	}
	for _, rc := range rowChecks {
		if got := refusal(t, c, rc.table, rc.set); got != rc.name {
			t.Errorf("trigger: %s %v refused by %q, want %q", rc.table, rc.set, got, rc.name)
		}
		if got := updateRefusal(t, c, rc.table, rc.set); got != rc.name {
			t.Errorf("trigger: %s updated to %v refused by %q, want %q", rc.table, rc.set, got, rc.name)
		}
	}

	if _, err := p.DownTo(ctx, 41); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, rc := range rowChecks {
		want = append(want, rc.name)
		if got := refusal(t, c, rc.table, rc.set); got != rc.name {
			t.Errorf("constraint: %s %v refused by %q, want %q", rc.table, rc.set, got, rc.name)
		}
		if got := updateRefusal(t, c, rc.table, rc.set); got != rc.name {
			t.Errorf("constraint: %s updated to %v refused by %q, want %q", rc.table, rc.set, got, rc.name)
		}
	}
	sort.Strings(want)
	if got := checksOn(); !slices.Equal(got, want) {
		t.Errorf("after Down the CHECK constraints are\n%v\nthe checks tested are\n%v", got, want)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if left := checksOn(); len(left) != 0 {
		t.Fatalf("CHECK constraints left after Up again: %v", left)
	}
}
