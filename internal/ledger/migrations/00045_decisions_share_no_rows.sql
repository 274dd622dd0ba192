-- +goose Up
-- A decision asserts its credential, agent and mandate still live under the
-- agent's revocation lock alone, with no share lock on their rows.
--
-- Every revocation (of the agent, its credential or its mandate, a new
-- mandate replacing one, the owner's withdrawal of the rail account) takes
-- the agent's revocation lock exclusively before its UPDATE, and a decision
-- holds it shared to its commit: a revocation waits for the decision in
-- flight, and a decision after it waits behind it. The rows' share locks
-- (FOR SHARE) on top of it were each a WAL record and a dirtied page on
-- every ALLOW (162 bytes of its WAL), and where decisions of one agent
-- overlap, a MultiXact per shared row. They were needed only for a reason
-- these functions remove: the decision's first statement took its snapshot
-- before it waited for the lock, so without FOR SHARE (which re-reads a row
-- updated meanwhile) it judged by a revocation's absence after waiting for
-- that revocation to commit. These functions are VOLATILE PL/pgSQL: each of
-- their queries takes a snapshot of its own, after the lock is granted, and
-- so sees every revocation committed before the decision could go on.

-- +goose StatementBegin
CREATE FUNCTION countersign_principal_live(p_credential text, p_agent text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_live boolean;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('countersign.agent/' || p_agent, 0));
    SELECT EXISTS (SELECT 1 FROM credentials c JOIN agents a ON a.id = c.agent_id
                   WHERE c.id = p_credential AND c.agent_id = p_agent AND c.revoked_at IS NULL
                     AND c.expires_at > now() AND a.status = 'active')
        INTO v_live;
    RETURN v_live;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION countersign_mandate_active(p_agent text, p_account text, p_hash text, p_at timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_active boolean;
BEGIN
    -- Taken again (a no-op when countersign_principal_live took it), so
    -- that this read waits for a revocation whoever calls it first.
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('countersign.agent/' || p_agent, 0));
    SELECT count(*) = 1 AND bool_and(hash = p_hash) FROM (
        SELECT m.hash FROM mandates m
        WHERE m.agent_id = p_agent AND m.rail_account = p_account AND m.revoked_at IS NULL
          AND m.valid_from <= p_at AND p_at < m.valid_until
          AND EXISTS (SELECT 1 FROM rail_account_owners g
                      WHERE g.rail_account = m.rail_account AND g.owner_id = m.owner_id AND g.revoked_at IS NULL)
        ORDER BY m.created_at DESC, m.hash LIMIT 1) active
        INTO v_active;
    RETURN v_active;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION countersign_mandate_active(text, text, text, timestamptz);
DROP FUNCTION countersign_principal_live(text, text);
