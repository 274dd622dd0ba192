-- +goose Up
-- The lineage functions of 00036, same answers, in PL/pgSQL. As SQL
-- functions PostgreSQL could not inline them (a sub-select in the body, a
-- FROM), so each call ran through the SQL-function executor, which plans
-- its query again on every call of the statement that calls it: the
-- window check paid two such plans (one per ANY (...)) and the lineage
-- lock one, about a quarter of a millisecond of every decision under a
-- mandate with a window, found by timing the decision's statements one by
-- one (pg_stat_statements). PL/pgSQL keeps its plans for the session.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_mandate_lineage(p_hash text) RETURNS text[]
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN ARRAY(SELECT p_hash UNION SELECT s.hash FROM mandates m
        JOIN mandates s ON s.agent_id = m.agent_id AND s.rail_account = m.rail_account
        WHERE m.hash = p_hash);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_lock_lineage(p_hash text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_agent   text;
    v_account text;
BEGIN
    SELECT agent_id, rail_account INTO v_agent, v_account FROM mandates WHERE hash = p_hash;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('countersign.lineage/' || v_agent || '/' || v_account, 0));
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_mandate_lineage(p_hash text) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT ARRAY(SELECT p_hash UNION SELECT s.hash FROM mandates m
        JOIN mandates s ON s.agent_id = m.agent_id AND s.rail_account = m.rail_account
        WHERE m.hash = p_hash)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_lock_lineage(p_hash text) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT count(*) = 1 FROM (
        SELECT pg_advisory_xact_lock(hashtextextended('countersign.lineage/' || agent_id || '/' || rail_account, 0))
        FROM mandates WHERE hash = p_hash
    ) l
$$;
-- +goose StatementEnd
