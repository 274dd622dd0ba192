-- +goose Up
-- A sliding window's count in time independent of how many holds it has.
-- Every decision under a mandate with windows counts the mandate's holds of
-- one agent or payee since a time, under the lock that makes the mandate's
-- decisions take turns; counting thousands of index entries there capped a
-- hot mandate's throughput. The holds are now also counted per minute, by a
-- trigger in the transaction that writes them, and a window sums the whole
-- minutes after the one its start falls in and counts the holds of that one
-- minute exactly: the same answer as counting every hold, for at most one
-- minute's worth of holds.

-- countersign_window_bucket is the minute a time falls in. date_bin on an
-- absolute origin does not depend on the session's TimeZone (date_trunc on
-- a timestamptz does), so the triggers and the readers always agree.
CREATE FUNCTION countersign_window_bucket(at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT date_bin('1 minute', at, timestamptz '2000-01-01 00:00:00+00') $$;

-- The mandate's non-voided holds per minute, per agent (by_payee false,
-- key the agent id) and per payee key (by_payee true), per currency.
CREATE TABLE window_buckets (
    mandate_hash text        NOT NULL,
    by_payee     boolean     NOT NULL,
    key          text        NOT NULL,
    bucket       timestamptz NOT NULL CHECK (bucket = countersign_window_bucket(bucket)),
    currency     text        NOT NULL,
    calls        bigint      NOT NULL CHECK (calls >= 0),
    amount_minor bigint      NOT NULL CHECK (amount_minor >= 0),
    PRIMARY KEY (mandate_hash, by_payee, key, bucket, currency)
);

-- +goose StatementBegin
-- countersign_window_count keeps window_buckets equal to the non-voided
-- holds: a hold counts from its insert (born held) until it is voided. The
-- hold guard (00004) lets a hold settle once and forbids deletes; a change
-- of what a hold is counted by is counted out of its old minute and into
-- its new one all the same, so the buckets never drift from the holds.
-- Which of a hold's scopes its mandate has windows of (the engine says;
-- holds written before this migration count in both). A mandate without a
-- window of a scope keeps no counters for it, so decisions under a mandate
-- of grants alone share no counter row.
ALTER TABLE budget_holds
    ADD COLUMN window_agent boolean NOT NULL DEFAULT true,
    ADD COLUMN window_payee boolean NOT NULL DEFAULT true;

CREATE FUNCTION countersign_window_count() RETURNS trigger
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
            -- An upsert cannot subtract (its new row's CHECK calls >= 0 is
            -- checked before the conflict is found); the rows exist. The
            -- agent's row first, then the payee's, as the insert below.
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

-- No hold is written between the backfill and the trigger: the lock waits
-- for the writers in progress and holds off new ones until this commits.
-- +goose StatementBegin
-- countersign_hold_keys_guard: what a hold is counted under (its agent, its
-- payee key, its subject, its time and its counted scopes) never changes
-- either (countersign_hold_guard keeps the rest but its settlement).
CREATE FUNCTION countersign_hold_keys_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.agent_id, NEW.payee_key, NEW.subject, NEW.created_at, NEW.window_agent, NEW.window_payee)
       IS DISTINCT FROM (OLD.agent_id, OLD.payee_key, OLD.subject, OLD.created_at, OLD.window_agent, OLD.window_payee) THEN
        RAISE EXCEPTION 'a budget hold is immutable but for its settlement' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER budget_holds_keys_guard BEFORE UPDATE OF agent_id, payee_key, subject, created_at, window_agent, window_payee ON budget_holds
    FOR EACH ROW EXECUTE FUNCTION countersign_hold_keys_guard();

LOCK TABLE budget_holds IN SHARE ROW EXCLUSIVE MODE;

CREATE TRIGGER budget_holds_window_count
    AFTER INSERT OR UPDATE OF state, mandate_hash, agent_id, payee_key, created_at, currency, amount_minor ON budget_holds
    FOR EACH ROW EXECUTE FUNCTION countersign_window_count();

INSERT INTO window_buckets (mandate_hash, by_payee, key, bucket, currency, calls, amount_minor)
SELECT mandate_hash, by_payee, key, countersign_window_bucket(created_at), currency, count(*), sum(amount_minor)
FROM budget_holds h CROSS JOIN LATERAL (VALUES (false, h.agent_id, h.window_agent), (true, h.payee_key, h.window_payee)) k (by_payee, key, counted)
WHERE state <> 'voided' AND k.counted
GROUP BY 1, 2, 3, 4, 5;

-- +goose StatementBegin
-- countersign_window_usage is the one definition of a sliding window's
-- count: the mandate's non-voided holds of key (an agent, or a payee key
-- when by_payee) created at or after since, all currencies for calls and
-- only currency for amount_minor ('' counts calls only). The minutes after
-- since's own come from window_buckets; the holds of since's own minute, at
-- or after since, are counted one by one through holds_mandate_agent or
-- holds_mandate_payee. A SQL function returning a set, STABLE, called in
-- FROM: PostgreSQL inlines it into the calling statement, whose plan the
-- connection caches like any other.
CREATE FUNCTION countersign_window_usage(p_hash text, p_by_payee boolean, p_key text, p_since timestamptz, p_currency text)
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

-- +goose Down
DROP FUNCTION countersign_window_usage(text, boolean, text, timestamptz, text);
DROP TRIGGER budget_holds_window_count ON budget_holds;
DROP FUNCTION countersign_window_count();
DROP TRIGGER budget_holds_keys_guard ON budget_holds;
DROP FUNCTION countersign_hold_keys_guard();
DROP TABLE window_buckets;
ALTER TABLE budget_holds DROP COLUMN window_agent, DROP COLUMN window_payee;
DROP FUNCTION countersign_window_bucket(timestamptz);
