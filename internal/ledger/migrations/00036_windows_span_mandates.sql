-- +goose Up
-- A sliding window counted the holds of its own mandate only. A mandate
-- never changes, so an owner tightens a daily cap by applying a new one
-- (the newest valid mandate of an agent on a rail account decides): its
-- windows started empty, and the agent could move the new cap again at
-- once, on top of what it had moved that day under the old one (found by
-- an attacker's-eye review).
--
-- A window now counts the agent's actions on the rail account under any
-- of its mandates there (the mandate's lineage: same agent, same rail
-- account, revoked and expired ones included), as what it limits is the
-- agent's pace, not a mandate's. The minute counters stay per mandate;
-- the count sums the lineage's. Holds under a mandate with no window of a
-- scope are still not counted for that scope (00014: they are never
-- added to its counters), so a cap set on an agent that had none counts
-- from the first mandate that has one.
--
-- The decisions of a lineage take turns on one lock (an advisory lock on
-- the agent and rail account, taken where the mandate's usage row was
-- locked), so two decisions under two of its mandates cannot both take
-- the last room of a window. The usage rows served only as that lock.

-- +goose StatementBegin
CREATE FUNCTION countersign_mandate_lineage(p_hash text) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT ARRAY(SELECT p_hash UNION SELECT s.hash FROM mandates m
        JOIN mandates s ON s.agent_id = m.agent_id AND s.rail_account = m.rail_account
        WHERE m.hash = p_hash)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_window_usage(p_hash text, p_by_payee boolean, p_key text, p_since timestamptz, p_currency text)
RETURNS TABLE (calls bigint, amount_minor bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT COALESCE(sum(u.calls), 0)::bigint, COALESCE(sum(u.amount_minor), 0)::bigint FROM (
        SELECT b.calls, CASE WHEN b.currency = p_currency THEN b.amount_minor ELSE 0 END
        FROM window_buckets b
        WHERE b.mandate_hash = ANY (countersign_mandate_lineage(p_hash)) AND b.by_payee = p_by_payee AND b.key = p_key
          AND b.bucket > countersign_window_bucket(p_since)
        UNION ALL
        SELECT 1, CASE WHEN h.currency = p_currency THEN h.amount_minor ELSE 0 END
        FROM budget_holds h
        WHERE NOT p_by_payee AND h.mandate_hash = ANY (countersign_mandate_lineage(p_hash)) AND h.agent_id = p_key AND h.state = 'posted' AND h.window_agent
          AND h.settled_at >= p_since AND h.settled_at < countersign_window_bucket(p_since) + interval '1 minute'
        UNION ALL
        SELECT 1, CASE WHEN h.currency = p_currency THEN h.amount_minor ELSE 0 END
        FROM budget_holds h
        WHERE p_by_payee AND h.mandate_hash = ANY (countersign_mandate_lineage(p_hash)) AND h.payee_key = p_key AND h.state = 'posted' AND h.window_payee
          AND h.settled_at >= p_since AND h.settled_at < countersign_window_bucket(p_since) + interval '1 minute'
    ) u (calls, amount_minor)
$$;
-- +goose StatementEnd

-- The lock the decisions of a mandate's lineage take turns on.
-- +goose StatementBegin
CREATE FUNCTION countersign_lock_lineage(p_hash text) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT count(*) = 1 FROM (
        SELECT pg_advisory_xact_lock(hashtextextended('countersign.lineage/' || agent_id || '/' || rail_account, 0))
        FROM mandates WHERE hash = p_hash
    ) l
$$;
-- +goose StatementEnd

DROP TABLE mandate_usage;

-- +goose Down
CREATE TABLE mandate_usage (
    mandate_hash text PRIMARY KEY CHECK (mandate_hash ~ '^[0-9a-f]{64}$')
);
INSERT INTO mandate_usage (mandate_hash) SELECT DISTINCT mandate_hash FROM budget_holds ON CONFLICT DO NOTHING;
DROP FUNCTION countersign_lock_lineage(text);
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
        WHERE NOT p_by_payee AND h.mandate_hash = p_hash AND h.agent_id = p_key AND h.state = 'posted' AND h.window_agent
          AND h.settled_at >= p_since AND h.settled_at < countersign_window_bucket(p_since) + interval '1 minute'
        UNION ALL
        SELECT 1, CASE WHEN h.currency = p_currency THEN h.amount_minor ELSE 0 END
        FROM budget_holds h
        WHERE p_by_payee AND h.mandate_hash = p_hash AND h.payee_key = p_key AND h.state = 'posted' AND h.window_payee
          AND h.settled_at >= p_since AND h.settled_at < countersign_window_bucket(p_since) + interval '1 minute'
    ) u (calls, amount_minor)
$$;
-- +goose StatementEnd
DROP FUNCTION countersign_mandate_lineage(text);
