-- +goose Up
-- The rows a decision writes are checked by a trigger per table instead of
-- CHECK constraints: the same conditions, the same SQLSTATE (23514), the same
-- constraint names, the same NULL-passes semantics, still enforced by
-- PostgreSQL on every INSERT and UPDATE whoever writes.
--
-- Why: PostgreSQL rebuilds a table's CHECK constraints from their stored node
-- text for every statement that writes the table (ExecRelCheck: stringToNode
-- and expression planning per ResultRelInfo, so per execution even of a
-- prepared statement). An ALLOW writes intents (15 constraints, 13 KB of node
-- text), attempts, decisions, a hold, an audit record, a window bucket and a
-- budget row: measured on the engine's one-caller decide loop, those rebuilds
-- were 0.2-0.25 ms of a 1.8 ms decision, and 17 % of PostgreSQL's CPU under
-- 16 callers (perf: ExecConstraints). A PL/pgSQL trigger compiles its
-- expressions once per connection and caches their plans.
--
-- Each table's checks run in a BEFORE row trigger named <table>_zz_checks:
-- BEFORE row triggers fire in name order, and like CHECK constraints these
-- must judge the row every other trigger leaves. They are ENABLE ALWAYS, so
-- they hold under session_replication_role = replica too (a logical
-- replication subscriber, pg_restore --disable-triggers), as the CHECKs
-- did; what they do not survive, and a CHECK does, is the tables' owner
-- running ALTER TABLE … DISABLE TRIGGER (that owner may as well drop a
-- CHECK). NOT NULL, UNIQUE, foreign keys and the tables written only by the
-- owner's or the operator's paths keep their constraints.

-- +goose StatementBegin
CREATE FUNCTION countersign_check_failed(rel text, name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"', rel, name
        USING ERRCODE = 'check_violation', CONSTRAINT = name, TABLE = rel;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION countersign_intents_checks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.state = ANY (ARRAY['PROPOSED', 'AUTHORIZED', 'IN_FLIGHT', 'APPLIED', 'FAILED_TERMINAL', 'UNKNOWN',
                                   'RECONCILING', 'CONFIRMED_NOT_APPLIED', 'HELD', 'BLOCKED', 'QUARANTINED'])) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_state_known');
    END IF;
    IF NOT (NEW.state <> ALL (ARRAY['IN_FLIGHT', 'UNKNOWN', 'RECONCILING', 'FAILED_TERMINAL', 'CONFIRMED_NOT_APPLIED', 'APPLIED'])
            OR NEW.attempt_count >= 1) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_check1');
    END IF;
    IF NOT (length(NEW.subject) >= 1 AND length(NEW.subject) <= 255) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_subject_check');
    END IF;
    IF NOT (length(NEW.rail_account) >= 1 AND length(NEW.rail_account) <= 128) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_rail_account_check');
    END IF;
    IF NOT ((NEW.state = 'APPLIED') = (NEW.rail_entity_id IS NOT NULL AND NEW.applied_attempt_seq IS NOT NULL)) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_check');
    END IF;
    IF NOT (NEW.state <> ALL (ARRAY['UNKNOWN', 'RECONCILING']) OR NEW.next_reconcile_at IS NOT NULL) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_check2');
    END IF;
    IF NOT (NEW.action = ANY (ARRAY['refund', 'payout', 'transfer'])) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_action_check');
    END IF;
    IF NOT (NEW.rail = ANY (ARRAY['stripe', 'razorpay', 'mcp'])) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_rail_check');
    END IF;
    IF NOT (NEW.stamp_generation >= 0 AND NEW.stamp_generation <= 46655) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_stamp_generation_check');
    END IF;
    IF NOT (NEW.sik ~ '^[A-Z2-7]{32}$') THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_sik_check');
    END IF;
    IF NOT (NEW.family ~ '^[A-Z2-7]{32}$') THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_family_check');
    END IF;
    IF NOT (NEW.currency ~ '^[A-Z]{3}$') THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_currency_check');
    END IF;
    IF NOT (NEW.attempt_count >= 0) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_attempt_count_check');
    END IF;
    IF NOT (NEW.reconcile_count >= 0) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_reconcile_count_check');
    END IF;
    IF NOT (NEW.amount_minor >= 0) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intents_amount_minor_check');
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION countersign_attempts_checks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.outcome = ANY (ARRAY['pending', 'applied', 'rejected', 'ambiguous', 'in_progress', 'fingerprint_mismatch',
                                     'lease_expired'])) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'attempts_outcome_check');
    END IF;
    IF NOT (length(NEW.stamp) >= 4 AND length(NEW.stamp) <= 255) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'attempts_stamp_check');
    END IF;
    IF NOT (NEW.commit_token_hash IS NULL OR length(NEW.commit_token_hash) = 32) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'attempts_commit_token_hash_check');
    END IF;
    IF NOT (NEW.outcome <> 'applied' OR NEW.entity_id IS NOT NULL) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'attempts_check');
    END IF;
    IF NOT (NEW.fee_minor IS NULL OR NEW.fee_minor >= 0) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'attempts_fee_minor_check');
    END IF;
    IF NOT (NEW.commit_agent IS NULL OR NEW.commit_token_hash IS NOT NULL) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'attempts_commit_agent_has_token');
    END IF;
    IF NOT (NEW.attempt_seq >= 1) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'attempts_attempt_seq_check');
    END IF;
    IF NOT (NOT (NEW.body_stamped AND NEW.left_unstamped)) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'attempts_stamped_or_not');
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION countersign_decisions_checks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.verdict = ANY (ARRAY['ALLOW', 'HOLD', 'BLOCK'])) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'decisions_verdict_check');
    END IF;
    IF NOT (NEW.source = ANY (ARRAY['ext_authz', 'decide'])) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'decisions_source_check');
    END IF;
    IF NOT (jsonb_typeof(NEW.gates) = 'array') THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'decisions_gates_check');
    END IF;
    IF NOT ((NEW.rail_account IS NULL) = (NEW.sik IS NULL)) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'decisions_intent');
    END IF;
    IF NOT (NEW.reason_code ~ '^[a-z][a-z0-9_]*$') THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'decisions_reason_code_check');
    END IF;
    IF NOT (NEW.credential_id IS NULL OR NEW.agent_id IS NOT NULL) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'decisions_check');
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION countersign_audit_records_checks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((NEW.chain IS NULL) = (NEW.seq IS NULL) AND (NEW.chain IS NULL) = (NEW.prev_hash IS NULL)
            AND (NEW.chain IS NULL) = (NEW.hash IS NULL)) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'audit_records_legacy_chain');
    END IF;
    IF NOT (length(NEW.hash) = 32) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'audit_records_hash_check');
    END IF;
    IF NOT (length(NEW.prev_hash) = 32) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'audit_records_prev_hash_check');
    END IF;
    IF NOT (NEW.leaf_index >= 0) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'audit_records_leaf_index_check');
    END IF;
    IF NOT (NEW.seq >= 1) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'audit_records_seq_check');
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION countersign_budget_holds_checks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.state = ANY (ARRAY['held', 'posted', 'voided'])) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'budget_holds_state_check');
    END IF;
    IF NOT ((NEW.state = 'held') = (NEW.settled_at IS NULL)) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'budget_holds_check');
    END IF;
    IF NOT (NEW.currency ~ '^[A-Z]{3}$') THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'budget_holds_currency_check');
    END IF;
    IF NOT (NEW.amount_minor >= 0) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'budget_holds_amount_minor_check');
    END IF;
    IF NOT (NEW.hold_seq >= 1) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'budget_holds_hold_seq_check');
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION countersign_window_buckets_checks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.shard >= 0 AND NEW.shard <= 15 AND (NEW.shard = 0 OR NEW.bucket = 'infinity')) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'window_buckets_shard_check');
    END IF;
    IF NOT (CASE WHEN NEW.bucket = 'infinity' THEN true ELSE NEW.bucket = countersign_window_bucket(NEW.bucket) END) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'window_buckets_bucket_check');
    END IF;
    IF NOT (NEW.amount_minor >= 0) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'window_buckets_amount_minor_check');
    END IF;
    IF NOT (NEW.calls >= 0) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'window_buckets_calls_check');
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION countersign_mandate_budgets_checks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.overrun_minor = GREATEST(0, NEW.reserved_minor - NEW.budget_minor)) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'budget_never_exceeded');
    END IF;
    IF NOT (NEW.currency ~ '^[A-Z]{3}$') THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'mandate_budgets_currency_check');
    END IF;
    IF NOT (NEW.reserved_minor >= 0) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'mandate_budgets_held_minor_check');
    END IF;
    IF NOT (NEW.budget_minor > 0) THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'mandate_budgets_budget_minor_check');
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION countersign_intent_aliases_checks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.alias ~ '^[A-Z2-7]{32}$') THEN
        PERFORM countersign_check_failed(TG_TABLE_NAME, 'intent_aliases_alias_check');
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

ALTER TABLE intents
    DROP CONSTRAINT intents_state_known, DROP CONSTRAINT intents_check1, DROP CONSTRAINT intents_subject_check,
    DROP CONSTRAINT intents_rail_account_check, DROP CONSTRAINT intents_check, DROP CONSTRAINT intents_check2,
    DROP CONSTRAINT intents_action_check, DROP CONSTRAINT intents_rail_check, DROP CONSTRAINT intents_stamp_generation_check,
    DROP CONSTRAINT intents_sik_check, DROP CONSTRAINT intents_family_check, DROP CONSTRAINT intents_currency_check,
    DROP CONSTRAINT intents_attempt_count_check, DROP CONSTRAINT intents_reconcile_count_check,
    DROP CONSTRAINT intents_amount_minor_check;
CREATE TRIGGER intents_zz_checks BEFORE INSERT OR UPDATE ON intents
    FOR EACH ROW EXECUTE FUNCTION countersign_intents_checks();
ALTER TABLE intents ENABLE ALWAYS TRIGGER intents_zz_checks;

ALTER TABLE attempts
    DROP CONSTRAINT attempts_outcome_check, DROP CONSTRAINT attempts_stamp_check, DROP CONSTRAINT attempts_commit_token_hash_check,
    DROP CONSTRAINT attempts_check, DROP CONSTRAINT attempts_fee_minor_check, DROP CONSTRAINT attempts_commit_agent_has_token,
    DROP CONSTRAINT attempts_attempt_seq_check, DROP CONSTRAINT attempts_stamped_or_not;
CREATE TRIGGER attempts_zz_checks BEFORE INSERT OR UPDATE ON attempts
    FOR EACH ROW EXECUTE FUNCTION countersign_attempts_checks();
ALTER TABLE attempts ENABLE ALWAYS TRIGGER attempts_zz_checks;

ALTER TABLE decisions
    DROP CONSTRAINT decisions_verdict_check, DROP CONSTRAINT decisions_source_check, DROP CONSTRAINT decisions_gates_check,
    DROP CONSTRAINT decisions_intent, DROP CONSTRAINT decisions_reason_code_check, DROP CONSTRAINT decisions_check;
CREATE TRIGGER decisions_zz_checks BEFORE INSERT OR UPDATE ON decisions
    FOR EACH ROW EXECUTE FUNCTION countersign_decisions_checks();
ALTER TABLE decisions ENABLE ALWAYS TRIGGER decisions_zz_checks;

ALTER TABLE audit_records
    DROP CONSTRAINT audit_records_legacy_chain, DROP CONSTRAINT audit_records_hash_check,
    DROP CONSTRAINT audit_records_prev_hash_check, DROP CONSTRAINT audit_records_leaf_index_check,
    DROP CONSTRAINT audit_records_seq_check;
CREATE TRIGGER audit_records_zz_checks BEFORE INSERT OR UPDATE ON audit_records
    FOR EACH ROW EXECUTE FUNCTION countersign_audit_records_checks();
ALTER TABLE audit_records ENABLE ALWAYS TRIGGER audit_records_zz_checks;

ALTER TABLE budget_holds
    DROP CONSTRAINT budget_holds_state_check, DROP CONSTRAINT budget_holds_check, DROP CONSTRAINT budget_holds_currency_check,
    DROP CONSTRAINT budget_holds_amount_minor_check, DROP CONSTRAINT budget_holds_hold_seq_check;
CREATE TRIGGER budget_holds_zz_checks BEFORE INSERT OR UPDATE ON budget_holds
    FOR EACH ROW EXECUTE FUNCTION countersign_budget_holds_checks();
ALTER TABLE budget_holds ENABLE ALWAYS TRIGGER budget_holds_zz_checks;

ALTER TABLE window_buckets
    DROP CONSTRAINT window_buckets_shard_check, DROP CONSTRAINT window_buckets_bucket_check,
    DROP CONSTRAINT window_buckets_amount_minor_check, DROP CONSTRAINT window_buckets_calls_check;
CREATE TRIGGER window_buckets_zz_checks BEFORE INSERT OR UPDATE ON window_buckets
    FOR EACH ROW EXECUTE FUNCTION countersign_window_buckets_checks();
ALTER TABLE window_buckets ENABLE ALWAYS TRIGGER window_buckets_zz_checks;

ALTER TABLE mandate_budgets
    DROP CONSTRAINT budget_never_exceeded, DROP CONSTRAINT mandate_budgets_currency_check,
    DROP CONSTRAINT mandate_budgets_held_minor_check, DROP CONSTRAINT mandate_budgets_budget_minor_check;
CREATE TRIGGER mandate_budgets_zz_checks BEFORE INSERT OR UPDATE ON mandate_budgets
    FOR EACH ROW EXECUTE FUNCTION countersign_mandate_budgets_checks();
ALTER TABLE mandate_budgets ENABLE ALWAYS TRIGGER mandate_budgets_zz_checks;

ALTER TABLE intent_aliases DROP CONSTRAINT intent_aliases_alias_check;
CREATE TRIGGER intent_aliases_zz_checks BEFORE INSERT OR UPDATE ON intent_aliases
    FOR EACH ROW EXECUTE FUNCTION countersign_intent_aliases_checks();
ALTER TABLE intent_aliases ENABLE ALWAYS TRIGGER intent_aliases_zz_checks;

-- +goose Down
DROP TRIGGER intents_zz_checks ON intents;
DROP TRIGGER attempts_zz_checks ON attempts;
DROP TRIGGER decisions_zz_checks ON decisions;
DROP TRIGGER audit_records_zz_checks ON audit_records;
DROP TRIGGER budget_holds_zz_checks ON budget_holds;
DROP TRIGGER window_buckets_zz_checks ON window_buckets;
DROP TRIGGER mandate_budgets_zz_checks ON mandate_budgets;
DROP TRIGGER intent_aliases_zz_checks ON intent_aliases;
DROP FUNCTION countersign_intents_checks(), countersign_attempts_checks(), countersign_decisions_checks(),
    countersign_audit_records_checks(), countersign_budget_holds_checks(), countersign_window_buckets_checks(),
    countersign_mandate_budgets_checks(), countersign_intent_aliases_checks();
DROP FUNCTION countersign_check_failed(text, text);

ALTER TABLE intents
    ADD CONSTRAINT intents_state_known CHECK (state = ANY (ARRAY['PROPOSED', 'AUTHORIZED', 'IN_FLIGHT', 'APPLIED',
        'FAILED_TERMINAL', 'UNKNOWN', 'RECONCILING', 'CONFIRMED_NOT_APPLIED', 'HELD', 'BLOCKED', 'QUARANTINED'])),
    ADD CONSTRAINT intents_check1 CHECK (state <> ALL (ARRAY['IN_FLIGHT', 'UNKNOWN', 'RECONCILING', 'FAILED_TERMINAL',
        'CONFIRMED_NOT_APPLIED', 'APPLIED']) OR attempt_count >= 1),
    ADD CONSTRAINT intents_subject_check CHECK (length(subject) >= 1 AND length(subject) <= 255),
    ADD CONSTRAINT intents_rail_account_check CHECK (length(rail_account) >= 1 AND length(rail_account) <= 128),
    ADD CONSTRAINT intents_check CHECK ((state = 'APPLIED') = (rail_entity_id IS NOT NULL AND applied_attempt_seq IS NOT NULL)),
    ADD CONSTRAINT intents_check2 CHECK (state <> ALL (ARRAY['UNKNOWN', 'RECONCILING']) OR next_reconcile_at IS NOT NULL),
    ADD CONSTRAINT intents_action_check CHECK (action = ANY (ARRAY['refund', 'payout', 'transfer'])),
    ADD CONSTRAINT intents_rail_check CHECK (rail = ANY (ARRAY['stripe', 'razorpay', 'mcp'])),
    ADD CONSTRAINT intents_stamp_generation_check CHECK (stamp_generation >= 0 AND stamp_generation <= 46655),
    ADD CONSTRAINT intents_sik_check CHECK (sik ~ '^[A-Z2-7]{32}$'),
    ADD CONSTRAINT intents_family_check CHECK (family ~ '^[A-Z2-7]{32}$'),
    ADD CONSTRAINT intents_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    ADD CONSTRAINT intents_attempt_count_check CHECK (attempt_count >= 0),
    ADD CONSTRAINT intents_reconcile_count_check CHECK (reconcile_count >= 0),
    ADD CONSTRAINT intents_amount_minor_check CHECK (amount_minor >= 0);

ALTER TABLE attempts
    ADD CONSTRAINT attempts_outcome_check CHECK (outcome = ANY (ARRAY['pending', 'applied', 'rejected', 'ambiguous',
        'in_progress', 'fingerprint_mismatch', 'lease_expired'])),
    ADD CONSTRAINT attempts_stamp_check CHECK (length(stamp) >= 4 AND length(stamp) <= 255),
    ADD CONSTRAINT attempts_commit_token_hash_check CHECK (commit_token_hash IS NULL OR length(commit_token_hash) = 32),
    ADD CONSTRAINT attempts_check CHECK (outcome <> 'applied' OR entity_id IS NOT NULL),
    ADD CONSTRAINT attempts_fee_minor_check CHECK (fee_minor IS NULL OR fee_minor >= 0),
    ADD CONSTRAINT attempts_commit_agent_has_token CHECK (commit_agent IS NULL OR commit_token_hash IS NOT NULL),
    ADD CONSTRAINT attempts_attempt_seq_check CHECK (attempt_seq >= 1),
    ADD CONSTRAINT attempts_stamped_or_not CHECK (NOT (body_stamped AND left_unstamped));

ALTER TABLE decisions
    ADD CONSTRAINT decisions_verdict_check CHECK (verdict = ANY (ARRAY['ALLOW', 'HOLD', 'BLOCK'])),
    ADD CONSTRAINT decisions_source_check CHECK (source = ANY (ARRAY['ext_authz', 'decide'])),
    ADD CONSTRAINT decisions_gates_check CHECK (jsonb_typeof(gates) = 'array'),
    ADD CONSTRAINT decisions_intent CHECK ((rail_account IS NULL) = (sik IS NULL)),
    ADD CONSTRAINT decisions_reason_code_check CHECK (reason_code ~ '^[a-z][a-z0-9_]*$'),
    ADD CONSTRAINT decisions_check CHECK (credential_id IS NULL OR agent_id IS NOT NULL);

ALTER TABLE audit_records
    ADD CONSTRAINT audit_records_legacy_chain CHECK ((chain IS NULL) = (seq IS NULL) AND (chain IS NULL) = (prev_hash IS NULL)
        AND (chain IS NULL) = (hash IS NULL)),
    ADD CONSTRAINT audit_records_hash_check CHECK (length(hash) = 32),
    ADD CONSTRAINT audit_records_prev_hash_check CHECK (length(prev_hash) = 32),
    ADD CONSTRAINT audit_records_leaf_index_check CHECK (leaf_index >= 0),
    ADD CONSTRAINT audit_records_seq_check CHECK (seq >= 1);

ALTER TABLE budget_holds
    ADD CONSTRAINT budget_holds_state_check CHECK (state = ANY (ARRAY['held', 'posted', 'voided'])),
    ADD CONSTRAINT budget_holds_check CHECK ((state = 'held') = (settled_at IS NULL)),
    ADD CONSTRAINT budget_holds_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    ADD CONSTRAINT budget_holds_amount_minor_check CHECK (amount_minor >= 0),
    ADD CONSTRAINT budget_holds_hold_seq_check CHECK (hold_seq >= 1);

ALTER TABLE window_buckets
    ADD CONSTRAINT window_buckets_shard_check CHECK (shard >= 0 AND shard <= 15 AND (shard = 0 OR bucket = 'infinity')),
    ADD CONSTRAINT window_buckets_bucket_check CHECK (CASE WHEN bucket = 'infinity' THEN true
        ELSE bucket = countersign_window_bucket(bucket) END),
    ADD CONSTRAINT window_buckets_amount_minor_check CHECK (amount_minor >= 0),
    ADD CONSTRAINT window_buckets_calls_check CHECK (calls >= 0);

ALTER TABLE mandate_budgets
    ADD CONSTRAINT budget_never_exceeded CHECK (overrun_minor = GREATEST(0, reserved_minor - budget_minor)),
    ADD CONSTRAINT mandate_budgets_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    ADD CONSTRAINT mandate_budgets_held_minor_check CHECK (reserved_minor >= 0),
    ADD CONSTRAINT mandate_budgets_budget_minor_check CHECK (budget_minor > 0);

ALTER TABLE intent_aliases ADD CONSTRAINT intent_aliases_alias_check CHECK (alias ~ '^[A-Z2-7]{32}$');
