-- +goose Up
-- The reconciler's claim and lease expiry take their turns owner by owner,
-- agent by agent, not in one global order (one agent's backlog of
-- ambiguous intents held every other owner's behind it). They read each
-- agent's oldest candidates, so these indexes hold an agent's intents in
-- the order they fall due: reconciliation (UNKNOWN, RECONCILING), and
-- lease expiry (IN_FLIGHT, oldest update first).
--
-- Each also says agent_id IS NOT NULL, which the per-agent reads imply
-- (agent_id = …) and no decision's read does: without it the planner
-- answered G2's outstanding sum on a subject (state IN ('IN_FLIGHT', …))
-- by scanning every IN_FLIGHT intent of the ledger through the first, an
-- agent's uncommitted ALLOWs then slowing every decision of every owner
-- (0.3 ms and growing, measured on the engine's decide loop).
CREATE INDEX intents_reconcile_agent ON intents (agent_id, next_reconcile_at)
    WHERE state IN ('UNKNOWN', 'RECONCILING') AND agent_id IS NOT NULL;
CREATE INDEX intents_in_flight_agent ON intents (agent_id, updated_at)
    WHERE state = 'IN_FLIGHT' AND agent_id IS NOT NULL;

-- +goose Down
DROP INDEX intents_in_flight_agent;
DROP INDEX intents_reconcile_agent;
