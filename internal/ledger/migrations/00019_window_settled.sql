-- +goose Up
-- A hold leaves a sliding window a window's length after the ledger knows
-- its effect happened, not after its decision began (DESIGN §5 G3, judged
-- from the rail's journal: no span of the window's length holds more than
-- the limit). A hold's decision starts before its lock wait, its commit and
-- the rail call, so counting it from created_at let the rail apply the
-- N+1th action of a window a few milliseconds inside the window of the
-- first. Now a hold counts:
--   held   (in flight, unknown): always — its effect may still be to come;
--   posted: until settled_at + the window, settled_at being when its
--           APPLIED answer was written, after the rail applied it;
--   voided: never — the rail proved it did not apply it.
-- So an action decided at t leaves out only holds applied before
-- t - window, and its own effect comes after t.

-- settled_at is the clock when the settling statement runs, not its
-- transaction's start (which may precede what it learned), and never
-- earlier than a time the writer names: the window can only be longer.
-- Once settled, it never changes.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_hold_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'budget holds are never deleted' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'held' OR NEW.settled_at IS NOT NULL THEN
            RAISE EXCEPTION 'a budget hold is born held' USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.budgeted THEN
            UPDATE mandate_budgets SET held_minor = held_minor + NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'no budget row for mandate % in %', NEW.mandate_hash, NEW.currency
                    USING ERRCODE = 'check_violation';
            END IF;
        END IF;
        RETURN NEW;
    END IF;
    IF (NEW.rail_account, NEW.sik, NEW.hold_seq, NEW.mandate_hash, NEW.currency, NEW.amount_minor, NEW.budgeted)
       IS DISTINCT FROM (OLD.rail_account, OLD.sik, OLD.hold_seq, OLD.mandate_hash, OLD.currency, OLD.amount_minor, OLD.budgeted) THEN
        RAISE EXCEPTION 'a budget hold is immutable but for its settlement' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = OLD.state THEN
        IF NEW.settled_at IS DISTINCT FROM OLD.settled_at THEN
            RAISE EXCEPTION 'budget hold %/%#%: settled_at is immutable but for its settlement', OLD.rail_account, OLD.sik, OLD.hold_seq
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.state <> 'held' THEN
        RAISE EXCEPTION 'budget hold %/%#% is already %: it settles exactly once', OLD.rail_account, OLD.sik, OLD.hold_seq, OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    NEW.settled_at := GREATEST(NEW.settled_at, clock_timestamp());
    IF NEW.budgeted THEN
        IF NEW.state = 'posted' THEN
            UPDATE mandate_budgets SET held_minor = held_minor - NEW.amount_minor, spent_minor = spent_minor + NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
        ELSE
            UPDATE mandate_budgets SET held_minor = held_minor - NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- countersign_hold_bucket is the minute counter a hold adds to: a held one
-- to the open counter ('infinity', after every window's start, so every
-- window counts it), a posted one to the minute of its settled_at, a
-- voided one to none (NULL).
CREATE FUNCTION countersign_hold_bucket(state text, settled_at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE state WHEN 'held' THEN timestamptz 'infinity' WHEN 'posted' THEN countersign_window_bucket(settled_at) END $$;

ALTER TABLE window_buckets DROP CONSTRAINT window_buckets_bucket_check,
    ADD CONSTRAINT window_buckets_bucket_check
        CHECK (CASE WHEN bucket = timestamptz 'infinity' THEN true ELSE bucket = countersign_window_bucket(bucket) END);

-- +goose StatementBegin
-- countersign_window_count keeps window_buckets equal to the holds by
-- countersign_hold_bucket: a hold is counted out of its old counter and
-- into its new one whenever what it is counted by changes (posting moves
-- it from the open counter to its answer's minute; voiding removes it).
CREATE OR REPLACE FUNCTION countersign_window_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_rows  integer;
    v_payee integer;
    v_old   timestamptz;
    v_new   timestamptz := countersign_hold_bucket(NEW.state, NEW.settled_at);
BEGIN
    IF TG_OP = 'UPDATE' THEN
        v_old := countersign_hold_bucket(OLD.state, OLD.settled_at);
        IF v_old IS NOT DISTINCT FROM v_new
           AND (OLD.mandate_hash, OLD.agent_id, OLD.payee_key, OLD.currency, OLD.amount_minor, OLD.window_agent, OLD.window_payee)
               IS NOT DISTINCT FROM (NEW.mandate_hash, NEW.agent_id, NEW.payee_key, NEW.currency, NEW.amount_minor, NEW.window_agent, NEW.window_payee) THEN
            RETURN NULL;
        END IF;
        IF v_old IS NOT NULL THEN
            -- An upsert cannot subtract (its new row's CHECK calls >= 0 is
            -- checked before the conflict is found); the rows exist. The
            -- agent's row first, then the payee's, as the insert below.
            UPDATE window_buckets SET calls = calls - 1, amount_minor = amount_minor - OLD.amount_minor
                WHERE OLD.window_agent AND mandate_hash = OLD.mandate_hash AND NOT by_payee AND key = OLD.agent_id
                  AND bucket = v_old AND currency = OLD.currency;
            GET DIAGNOSTICS v_rows = ROW_COUNT;
            UPDATE window_buckets SET calls = calls - 1, amount_minor = amount_minor - OLD.amount_minor
                WHERE OLD.window_payee AND mandate_hash = OLD.mandate_hash AND by_payee AND key = OLD.payee_key
                  AND bucket = v_old AND currency = OLD.currency;
            GET DIAGNOSTICS v_payee = ROW_COUNT;
            IF v_rows + v_payee <> OLD.window_agent::integer + OLD.window_payee::integer THEN
                RAISE EXCEPTION 'budget hold %/%#% was not counted in window_buckets', OLD.rail_account, OLD.sik, OLD.hold_seq
                    USING ERRCODE = 'check_violation';
            END IF;
        END IF;
    END IF;
    IF v_new IS NOT NULL THEN
        INSERT INTO window_buckets AS b (mandate_hash, by_payee, key, bucket, currency, calls, amount_minor)
        SELECT NEW.mandate_hash, k.by_payee, k.key, v_new, NEW.currency, 1, NEW.amount_minor
        FROM (VALUES (false, NEW.agent_id, NEW.window_agent), (true, NEW.payee_key, NEW.window_payee)) k (by_payee, key, counted)
        WHERE k.counted
        ON CONFLICT (mandate_hash, by_payee, key, bucket, currency) DO UPDATE
            SET calls = b.calls + EXCLUDED.calls, amount_minor = b.amount_minor + EXCLUDED.amount_minor;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- The holds of a window start's own minute are the posted ones settled in
-- it: counted one by one through these. The created_at indexes counted
-- them before and serve nothing now.
CREATE INDEX holds_posted_agent ON budget_holds (mandate_hash, agent_id, settled_at) INCLUDE (amount_minor, currency) WHERE state = 'posted';
CREATE INDEX holds_posted_payee ON budget_holds (mandate_hash, payee_key, settled_at) INCLUDE (amount_minor, currency) WHERE state = 'posted';
DROP INDEX holds_mandate_agent;
DROP INDEX holds_mandate_payee;

-- +goose StatementBegin
-- countersign_window_usage, as in 00014, by the new rule: the minutes
-- after since's own from window_buckets (the open counter among them), and
-- the posted holds settled in since's own minute, at or after since.
CREATE OR REPLACE FUNCTION countersign_window_usage(p_hash text, p_by_payee boolean, p_key text, p_since timestamptz, p_currency text)
RETURNS TABLE (calls bigint, amount_minor bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT COALESCE(sum(u.calls), 0)::bigint, COALESCE(sum(u.amount_minor), 0)::bigint FROM (
        SELECT b.calls, CASE WHEN b.currency = p_currency THEN b.amount_minor ELSE 0 END
        FROM window_buckets b
        WHERE b.mandate_hash = p_hash AND b.by_payee = p_by_payee AND b.key = p_key
          AND b.bucket > countersign_window_bucket(p_since)
        UNION ALL
        SELECT 1, CASE WHEN h.currency = p_currency THEN h.amount_minor ELSE 0 END
        FROM budget_holds h
        WHERE NOT p_by_payee AND h.mandate_hash = p_hash AND h.agent_id = p_key AND h.state = 'posted'
          AND h.settled_at >= p_since AND h.settled_at < countersign_window_bucket(p_since) + interval '1 minute'
        UNION ALL
        SELECT 1, CASE WHEN h.currency = p_currency THEN h.amount_minor ELSE 0 END
        FROM budget_holds h
        WHERE p_by_payee AND h.mandate_hash = p_hash AND h.payee_key = p_key AND h.state = 'posted'
          AND h.settled_at >= p_since AND h.settled_at < countersign_window_bucket(p_since) + interval '1 minute'
    ) u (calls, amount_minor)
$$;
-- +goose StatementEnd

-- The counters again, by the new keys; no hold is written meanwhile.
LOCK TABLE budget_holds IN SHARE ROW EXCLUSIVE MODE;
DELETE FROM window_buckets;
INSERT INTO window_buckets (mandate_hash, by_payee, key, bucket, currency, calls, amount_minor)
SELECT mandate_hash, by_payee, key, countersign_hold_bucket(state, settled_at), currency, count(*), sum(amount_minor)
FROM budget_holds h CROSS JOIN LATERAL (VALUES (false, h.agent_id, h.window_agent), (true, h.payee_key, h.window_payee)) k (by_payee, key, counted)
WHERE state <> 'voided' AND k.counted
GROUP BY 1, 2, 3, 4, 5;

-- +goose Down
LOCK TABLE budget_holds IN SHARE ROW EXCLUSIVE MODE;
CREATE INDEX holds_mandate_agent ON budget_holds (mandate_hash, agent_id, created_at) INCLUDE (amount_minor, currency) WHERE state <> 'voided';
CREATE INDEX holds_mandate_payee ON budget_holds (mandate_hash, payee_key, created_at) INCLUDE (amount_minor, currency) WHERE state <> 'voided';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_window_usage(p_hash text, p_by_payee boolean, p_key text, p_since timestamptz, p_currency text)
RETURNS TABLE (calls bigint, amount_minor bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT COALESCE(sum(u.calls), 0)::bigint, COALESCE(sum(u.amount_minor), 0)::bigint FROM (
        SELECT b.calls, CASE WHEN b.currency = p_currency THEN b.amount_minor ELSE 0 END
        FROM window_buckets b
        WHERE b.mandate_hash = p_hash AND b.by_payee = p_by_payee AND b.key = p_key
          AND b.bucket > countersign_window_bucket(p_since)
        UNION ALL
        SELECT 1, CASE WHEN h.currency = p_currency THEN h.amount_minor ELSE 0 END
        FROM budget_holds h
        WHERE NOT p_by_payee AND h.mandate_hash = p_hash AND h.agent_id = p_key AND h.state <> 'voided'
          AND h.created_at >= p_since AND h.created_at < countersign_window_bucket(p_since) + interval '1 minute'
        UNION ALL
        SELECT 1, CASE WHEN h.currency = p_currency THEN h.amount_minor ELSE 0 END
        FROM budget_holds h
        WHERE p_by_payee AND h.mandate_hash = p_hash AND h.payee_key = p_key AND h.state <> 'voided'
          AND h.created_at >= p_since AND h.created_at < countersign_window_bucket(p_since) + interval '1 minute'
    ) u (calls, amount_minor)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_window_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_rows  integer;
    v_payee integer;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (OLD.state = 'voided') = (NEW.state = 'voided')
           AND (OLD.mandate_hash, OLD.agent_id, OLD.payee_key, OLD.created_at, OLD.currency, OLD.amount_minor, OLD.window_agent, OLD.window_payee)
               IS NOT DISTINCT FROM (NEW.mandate_hash, NEW.agent_id, NEW.payee_key, NEW.created_at, NEW.currency, NEW.amount_minor, NEW.window_agent, NEW.window_payee) THEN
            RETURN NULL;
        END IF;
        IF OLD.state <> 'voided' THEN
            UPDATE window_buckets SET calls = calls - 1, amount_minor = amount_minor - OLD.amount_minor
                WHERE OLD.window_agent AND mandate_hash = OLD.mandate_hash AND NOT by_payee AND key = OLD.agent_id
                  AND bucket = countersign_window_bucket(OLD.created_at) AND currency = OLD.currency;
            GET DIAGNOSTICS v_rows = ROW_COUNT;
            UPDATE window_buckets SET calls = calls - 1, amount_minor = amount_minor - OLD.amount_minor
                WHERE OLD.window_payee AND mandate_hash = OLD.mandate_hash AND by_payee AND key = OLD.payee_key
                  AND bucket = countersign_window_bucket(OLD.created_at) AND currency = OLD.currency;
            GET DIAGNOSTICS v_payee = ROW_COUNT;
            IF v_rows + v_payee <> OLD.window_agent::integer + OLD.window_payee::integer THEN
                RAISE EXCEPTION 'budget hold %/%#% was not counted in window_buckets', OLD.rail_account, OLD.sik, OLD.hold_seq
                    USING ERRCODE = 'check_violation';
            END IF;
        END IF;
    END IF;
    IF NEW.state <> 'voided' THEN
        INSERT INTO window_buckets AS b (mandate_hash, by_payee, key, bucket, currency, calls, amount_minor)
        SELECT NEW.mandate_hash, k.by_payee, k.key, countersign_window_bucket(NEW.created_at), NEW.currency, 1, NEW.amount_minor
        FROM (VALUES (false, NEW.agent_id, NEW.window_agent), (true, NEW.payee_key, NEW.window_payee)) k (by_payee, key, counted)
        WHERE k.counted
        ON CONFLICT (mandate_hash, by_payee, key, bucket, currency) DO UPDATE
            SET calls = b.calls + EXCLUDED.calls, amount_minor = b.amount_minor + EXCLUDED.amount_minor;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DELETE FROM window_buckets;
ALTER TABLE window_buckets DROP CONSTRAINT window_buckets_bucket_check,
    ADD CONSTRAINT window_buckets_bucket_check CHECK (bucket = countersign_window_bucket(bucket));
INSERT INTO window_buckets (mandate_hash, by_payee, key, bucket, currency, calls, amount_minor)
SELECT mandate_hash, by_payee, key, countersign_window_bucket(created_at), currency, count(*), sum(amount_minor)
FROM budget_holds h CROSS JOIN LATERAL (VALUES (false, h.agent_id, h.window_agent), (true, h.payee_key, h.window_payee)) k (by_payee, key, counted)
WHERE state <> 'voided' AND k.counted
GROUP BY 1, 2, 3, 4, 5;
DROP INDEX holds_posted_agent;
DROP INDEX holds_posted_payee;
DROP FUNCTION countersign_hold_bucket(text, timestamptz);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_hold_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'budget holds are never deleted' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'held' THEN
            RAISE EXCEPTION 'a budget hold is born held' USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.budgeted THEN
            UPDATE mandate_budgets SET held_minor = held_minor + NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'no budget row for mandate % in %', NEW.mandate_hash, NEW.currency
                    USING ERRCODE = 'check_violation';
            END IF;
        END IF;
        RETURN NEW;
    END IF;
    IF (NEW.rail_account, NEW.sik, NEW.hold_seq, NEW.mandate_hash, NEW.currency, NEW.amount_minor, NEW.budgeted)
       IS DISTINCT FROM (OLD.rail_account, OLD.sik, OLD.hold_seq, OLD.mandate_hash, OLD.currency, OLD.amount_minor, OLD.budgeted) THEN
        RAISE EXCEPTION 'a budget hold is immutable but for its settlement' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = OLD.state THEN
        RETURN NEW;
    END IF;
    IF OLD.state <> 'held' THEN
        RAISE EXCEPTION 'budget hold %/%#% is already %: it settles exactly once', OLD.rail_account, OLD.sik, OLD.hold_seq, OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    NEW.settled_at := now();
    IF NEW.budgeted THEN
        IF NEW.state = 'posted' THEN
            UPDATE mandate_budgets SET held_minor = held_minor - NEW.amount_minor, spent_minor = spent_minor + NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
        ELSE
            UPDATE mandate_budgets SET held_minor = held_minor - NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
