-- +goose Up
-- The two rows every decision UPDATEs, its mandate's budget row and its
-- window bucket, no longer take a row lock of their own before the update:
-- a tuple lock is a WAL record (heap_lock_tuple: XLOG_HEAP_LOCK, 54 bytes),
-- and pg_walinspect showed one on mandate_budgets and one on window_buckets
-- just before each one's HOT_UPDATE on every ALLOW (108 of its 4,365 bytes
-- of WAL before the answer).
--
-- mandate_budgets: PostgreSQL locks the old version of a row before it runs
-- a BEFORE UPDATE row trigger on it (PostgreSQL 15
-- src/backend/commands/trigger.c: ExecBRUpdateTriggers → GetTupleForTrigger
-- → table_tuple_lock). Migration 00042's checks therefore run BEFORE INSERT
-- and AFTER UPDATE (an AFTER row trigger reads the new row by its tid and
-- locks nothing): the same function, conditions, names and SQLSTATE, and an
-- UPDATE they refuse still fails with its statement. (CHECK constraints
-- again would also lock nothing, but measured slower: their per-statement
-- rebuild, with countersign_window_bucket inlined each time.)
--
-- window_buckets: the same trigger split, and the count is an UPDATE first:
-- INSERT … ON CONFLICT DO UPDATE locks the row it finds before updating it
-- (ExecOnConflictUpdate), and the row exists for every hold but the first
-- of its minute. The upsert remains for a row not there yet, or inserted
-- meanwhile by a concurrent decision.

DROP TRIGGER window_buckets_zz_checks ON window_buckets;
CREATE TRIGGER window_buckets_zz_checks BEFORE INSERT ON window_buckets
    FOR EACH ROW EXECUTE FUNCTION countersign_window_buckets_checks();
CREATE TRIGGER window_buckets_zz_checks_updated AFTER UPDATE ON window_buckets
    FOR EACH ROW EXECUTE FUNCTION countersign_window_buckets_checks();
ALTER TABLE window_buckets ENABLE ALWAYS TRIGGER window_buckets_zz_checks;
ALTER TABLE window_buckets ENABLE ALWAYS TRIGGER window_buckets_zz_checks_updated;

DROP TRIGGER mandate_budgets_zz_checks ON mandate_budgets;
CREATE TRIGGER mandate_budgets_zz_checks BEFORE INSERT ON mandate_budgets
    FOR EACH ROW EXECUTE FUNCTION countersign_mandate_budgets_checks();
CREATE TRIGGER mandate_budgets_zz_checks_updated AFTER UPDATE ON mandate_budgets
    FOR EACH ROW EXECUTE FUNCTION countersign_mandate_budgets_checks();
ALTER TABLE mandate_budgets ENABLE ALWAYS TRIGGER mandate_budgets_zz_checks;
ALTER TABLE mandate_budgets ENABLE ALWAYS TRIGGER mandate_budgets_zz_checks_updated;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_window_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_rows  integer;
    v_payee integer;
    v_old   timestamptz;
    v_new   timestamptz := countersign_hold_bucket(NEW.state, NEW.settled_at);
    v_shard smallint;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        v_old := countersign_hold_bucket(OLD.state, OLD.settled_at);
        IF v_old IS NOT DISTINCT FROM v_new
           AND (OLD.mandate_hash, OLD.agent_id, OLD.payee_key, OLD.currency, OLD.amount_minor, OLD.window_agent, OLD.window_payee)
               IS NOT DISTINCT FROM (NEW.mandate_hash, NEW.agent_id, NEW.payee_key, NEW.currency, NEW.amount_minor, NEW.window_agent, NEW.window_payee) THEN
            RETURN NULL;
        END IF;
        IF v_old IS NOT NULL THEN
            v_shard := countersign_hold_shard(v_old, OLD.sik);
            -- An upsert cannot subtract (its new row's CHECK calls >= 0 is
            -- checked before the conflict is found); the rows exist. The
            -- agent's row first, then the payee's, as the insert below.
            UPDATE window_buckets SET calls = calls - 1, amount_minor = amount_minor - OLD.amount_minor
                WHERE OLD.window_agent AND mandate_hash = OLD.mandate_hash AND NOT by_payee AND key = OLD.agent_id
                  AND bucket = v_old AND currency = OLD.currency AND shard = v_shard;
            GET DIAGNOSTICS v_rows = ROW_COUNT;
            UPDATE window_buckets SET calls = calls - 1, amount_minor = amount_minor - OLD.amount_minor
                WHERE OLD.window_payee AND mandate_hash = OLD.mandate_hash AND by_payee AND key = OLD.payee_key
                  AND bucket = v_old AND currency = OLD.currency AND shard = v_shard;
            GET DIAGNOSTICS v_payee = ROW_COUNT;
            IF v_rows + v_payee <> OLD.window_agent::integer + OLD.window_payee::integer THEN
                RAISE EXCEPTION 'budget hold %/%#% was not counted in window_buckets', OLD.rail_account, OLD.sik, OLD.hold_seq
                    USING ERRCODE = 'check_violation';
            END IF;
        END IF;
    END IF;
    IF v_new IS NOT NULL THEN
        -- An UPDATE first: ON CONFLICT DO UPDATE locks the row it finds
        -- before updating it, a WAL record of its own on nearly every
        -- decision (the bucket's row exists but for its first hold). The
        -- upsert is left for a row not there yet (or inserted meanwhile by
        -- a concurrent decision). The agent's row first, then the payee's.
        v_shard := countersign_hold_shard(v_new, NEW.sik);
        IF NEW.window_agent THEN
            UPDATE window_buckets SET calls = calls + 1, amount_minor = amount_minor + NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND NOT by_payee AND key = NEW.agent_id
                  AND bucket = v_new AND currency = NEW.currency AND shard = v_shard;
            IF NOT FOUND THEN
                INSERT INTO window_buckets AS b (mandate_hash, by_payee, key, bucket, currency, shard, calls, amount_minor)
                VALUES (NEW.mandate_hash, false, NEW.agent_id, v_new, NEW.currency, v_shard, 1, NEW.amount_minor)
                ON CONFLICT (mandate_hash, by_payee, key, bucket, currency, shard) DO UPDATE
                    SET calls = b.calls + EXCLUDED.calls, amount_minor = b.amount_minor + EXCLUDED.amount_minor;
            END IF;
        END IF;
        IF NEW.window_payee THEN
            UPDATE window_buckets SET calls = calls + 1, amount_minor = amount_minor + NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND by_payee AND key = NEW.payee_key
                  AND bucket = v_new AND currency = NEW.currency AND shard = v_shard;
            IF NOT FOUND THEN
                INSERT INTO window_buckets AS b (mandate_hash, by_payee, key, bucket, currency, shard, calls, amount_minor)
                VALUES (NEW.mandate_hash, true, NEW.payee_key, v_new, NEW.currency, v_shard, 1, NEW.amount_minor)
                ON CONFLICT (mandate_hash, by_payee, key, bucket, currency, shard) DO UPDATE
                    SET calls = b.calls + EXCLUDED.calls, amount_minor = b.amount_minor + EXCLUDED.amount_minor;
            END IF;
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_window_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_rows  integer;
    v_payee integer;
    v_old   timestamptz;
    v_new   timestamptz := countersign_hold_bucket(NEW.state, NEW.settled_at);
    v_shard smallint;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        v_old := countersign_hold_bucket(OLD.state, OLD.settled_at);
        IF v_old IS NOT DISTINCT FROM v_new
           AND (OLD.mandate_hash, OLD.agent_id, OLD.payee_key, OLD.currency, OLD.amount_minor, OLD.window_agent, OLD.window_payee)
               IS NOT DISTINCT FROM (NEW.mandate_hash, NEW.agent_id, NEW.payee_key, NEW.currency, NEW.amount_minor, NEW.window_agent, NEW.window_payee) THEN
            RETURN NULL;
        END IF;
        IF v_old IS NOT NULL THEN
            v_shard := countersign_hold_shard(v_old, OLD.sik);
            -- An upsert cannot subtract (its new row's CHECK calls >= 0 is
            -- checked before the conflict is found); the rows exist. The
            -- agent's row first, then the payee's, as the insert below.
            UPDATE window_buckets SET calls = calls - 1, amount_minor = amount_minor - OLD.amount_minor
                WHERE OLD.window_agent AND mandate_hash = OLD.mandate_hash AND NOT by_payee AND key = OLD.agent_id
                  AND bucket = v_old AND currency = OLD.currency AND shard = v_shard;
            GET DIAGNOSTICS v_rows = ROW_COUNT;
            UPDATE window_buckets SET calls = calls - 1, amount_minor = amount_minor - OLD.amount_minor
                WHERE OLD.window_payee AND mandate_hash = OLD.mandate_hash AND by_payee AND key = OLD.payee_key
                  AND bucket = v_old AND currency = OLD.currency AND shard = v_shard;
            GET DIAGNOSTICS v_payee = ROW_COUNT;
            IF v_rows + v_payee <> OLD.window_agent::integer + OLD.window_payee::integer THEN
                RAISE EXCEPTION 'budget hold %/%#% was not counted in window_buckets', OLD.rail_account, OLD.sik, OLD.hold_seq
                    USING ERRCODE = 'check_violation';
            END IF;
        END IF;
    END IF;
    IF v_new IS NOT NULL THEN
        INSERT INTO window_buckets AS b (mandate_hash, by_payee, key, bucket, currency, shard, calls, amount_minor)
        SELECT NEW.mandate_hash, k.by_payee, k.key, v_new, NEW.currency, countersign_hold_shard(v_new, NEW.sik), 1, NEW.amount_minor
        FROM (VALUES (false, NEW.agent_id, NEW.window_agent), (true, NEW.payee_key, NEW.window_payee)) k (by_payee, key, counted)
        WHERE k.counted
        ON CONFLICT (mandate_hash, by_payee, key, bucket, currency, shard) DO UPDATE
            SET calls = b.calls + EXCLUDED.calls, amount_minor = b.amount_minor + EXCLUDED.amount_minor;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER mandate_budgets_zz_checks_updated ON mandate_budgets;
DROP TRIGGER mandate_budgets_zz_checks ON mandate_budgets;
CREATE TRIGGER mandate_budgets_zz_checks BEFORE INSERT OR UPDATE ON mandate_budgets
    FOR EACH ROW EXECUTE FUNCTION countersign_mandate_budgets_checks();
ALTER TABLE mandate_budgets ENABLE ALWAYS TRIGGER mandate_budgets_zz_checks;

DROP TRIGGER window_buckets_zz_checks_updated ON window_buckets;
DROP TRIGGER window_buckets_zz_checks ON window_buckets;
CREATE TRIGGER window_buckets_zz_checks BEFORE INSERT OR UPDATE ON window_buckets
    FOR EACH ROW EXECUTE FUNCTION countersign_window_buckets_checks();
ALTER TABLE window_buckets ENABLE ALWAYS TRIGGER window_buckets_zz_checks;
