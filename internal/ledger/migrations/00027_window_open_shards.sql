-- +goose Up
-- The open counter of a window (bucket 'infinity', the holds still held)
-- was one row per agent and per payee key. Every decision under the
-- mandate adds to it, under the mandate's lock, and every APPLIED commit
-- takes from it, so a commit waited for the decision then committing, and
-- the next decision, inside the mandate's lock, waited for that commit's
-- WAL flush: a hot mandate's decisions took turns with its commits too.
-- The open counter is now split over 16 rows by the hold's SIK (its last
-- character's place in the base32 alphabet, which the SIK's hash makes
-- uniform and no server setting or version can change: the row a hold is
-- taken from must be the one it was added to). A decision and a commit of
-- different intents now meet on it once in 16. The minute counters of
-- posted holds stay one row each: a window sums every one of them after
-- its start, inside the mandate's lock, and 16 times as many rows would
-- make every decision longer there. countersign_window_usage sums every
-- row it matches, so it counts the same.
-- +goose StatementBegin
CREATE FUNCTION countersign_hold_shard(bucket timestamptz, sik text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN bucket = timestamptz 'infinity'
    THEN ((strpos('ABCDEFGHIJKLMNOPQRSTUVWXYZ234567', right(sik, 1)) - 1) & 15)::smallint ELSE 0::smallint END $$;
-- +goose StatementEnd

LOCK TABLE budget_holds IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE window_buckets ADD COLUMN shard smallint NOT NULL DEFAULT 0,
    ADD CONSTRAINT window_buckets_shard_check CHECK (shard BETWEEN 0 AND 15 AND (shard = 0 OR bucket = timestamptz 'infinity')),
    DROP CONSTRAINT window_buckets_pkey,
    ADD PRIMARY KEY (mandate_hash, by_payee, key, bucket, currency, shard);
DELETE FROM window_buckets WHERE bucket = timestamptz 'infinity';
INSERT INTO window_buckets (mandate_hash, by_payee, key, bucket, currency, shard, calls, amount_minor)
SELECT mandate_hash, by_payee, key, timestamptz 'infinity', currency, countersign_hold_shard(timestamptz 'infinity', sik), count(*), sum(amount_minor)
FROM budget_holds h CROSS JOIN LATERAL (VALUES (false, h.agent_id, h.window_agent), (true, h.payee_key, h.window_payee)) k (by_payee, key, counted)
WHERE state = 'held' AND k.counted
GROUP BY 1, 2, 3, 4, 5, 6;

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

-- +goose Down
LOCK TABLE budget_holds IN SHARE ROW EXCLUSIVE MODE;
-- +goose StatementBegin
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
DELETE FROM window_buckets WHERE bucket = timestamptz 'infinity';
ALTER TABLE window_buckets DROP CONSTRAINT window_buckets_pkey, DROP CONSTRAINT window_buckets_shard_check, DROP COLUMN shard,
    ADD PRIMARY KEY (mandate_hash, by_payee, key, bucket, currency);
INSERT INTO window_buckets (mandate_hash, by_payee, key, bucket, currency, calls, amount_minor)
SELECT mandate_hash, by_payee, key, timestamptz 'infinity', currency, count(*), sum(amount_minor)
FROM budget_holds h CROSS JOIN LATERAL (VALUES (false, h.agent_id, h.window_agent), (true, h.payee_key, h.window_payee)) k (by_payee, key, counted)
WHERE state = 'held' AND k.counted
GROUP BY 1, 2, 3, 4, 5;
DROP FUNCTION countersign_hold_shard(timestamptz, text);
