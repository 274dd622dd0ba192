-- +goose Up
-- A HOLD counts its agent's pending approvals (--max-pending-approvals):
-- this index keeps that count to the agent's pending ones, not a scan of
-- every approval ever opened. Only approvals are written through it.
CREATE INDEX approvals_agent_pending ON approvals (agent_id, expires_at) WHERE state = 'pending';

-- +goose Down
DROP INDEX approvals_agent_pending;
