-- +goose Up
-- The reconciler's claim and lease expiry take their turns owner by owner,
-- agent by agent, not in one global order (one agent's backlog of
-- ambiguous intents held every other owner's behind it). They read each
-- agent's oldest candidates, so these indexes hold an agent's intents in
-- the order they fall due: reconciliation (UNKNOWN, RECONCILING), and
-- lease expiry (IN_FLIGHT, oldest update first).
CREATE INDEX intents_reconcile_agent ON intents (agent_id, next_reconcile_at) WHERE state IN ('UNKNOWN', 'RECONCILING');
CREATE INDEX intents_in_flight_agent ON intents (agent_id, updated_at) WHERE state = 'IN_FLIGHT';

-- +goose Down
DROP INDEX intents_in_flight_agent;
DROP INDEX intents_reconcile_agent;
