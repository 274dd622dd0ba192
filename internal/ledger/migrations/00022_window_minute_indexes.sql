-- +goose Up
-- A window counts the posted holds of its start's own minute one by one
-- (00019). The agent's count and the payee's count each had an index of
-- the same shape and the same predicate, so before the planner had
-- statistics (a new ledger, a new table) it tied them and could pick the
-- payee's index for an agent's count: mandate_hash is its only usable
-- prefix there, so every count under the lock that makes a mandate's
-- decisions take turns read every posted hold of the mandate (measured: 20
-- buffers after 700 holds, growing with each ALLOW). Each index now also
-- names the scope it counts, and each count says which scope's holds it
-- counts: the payee's index cannot serve an agent's count, whatever the
-- statistics. The count is the same: the minute counters (window_buckets)
-- count a hold only in the scopes it was written for (00014), and every
-- hold of a mandate is written for the same scopes. A mandate without a
-- payee window no longer adds its posted holds to the payee's index.
DROP INDEX holds_posted_agent;
DROP INDEX holds_posted_payee;
CREATE INDEX holds_posted_agent ON budget_holds (mandate_hash, agent_id, settled_at) INCLUDE (amount_minor, currency)
    WHERE state = 'posted' AND window_agent;
CREATE INDEX holds_posted_payee ON budget_holds (mandate_hash, payee_key, settled_at) INCLUDE (amount_minor, currency)
    WHERE state = 'posted' AND window_payee;

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

-- +goose Down
DROP INDEX holds_posted_agent;
DROP INDEX holds_posted_payee;
CREATE INDEX holds_posted_agent ON budget_holds (mandate_hash, agent_id, settled_at) INCLUDE (amount_minor, currency) WHERE state = 'posted';
CREATE INDEX holds_posted_payee ON budget_holds (mandate_hash, payee_key, settled_at) INCLUDE (amount_minor, currency) WHERE state = 'posted';

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
