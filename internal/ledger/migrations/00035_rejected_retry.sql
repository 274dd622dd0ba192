-- +goose Up
-- An owner's "no" to a retry sticks. A request proven not applied
-- (FAILED_TERMINAL: the rail refused it; CONFIRMED_NOT_APPLIED: a listing
-- proved it absent) that is sent again under an approval_required mandate
-- is held for the owner again without leaving its state; rejecting that
-- approval moved nothing, so every identical request opened a new
-- approval, and the agent could queue the same request again and again
-- for a tired or mistaken "yes" (found by a review). Rejecting it now ends
-- the intent BLOCKED, as a rejected HELD intent ends: nothing of it is at
-- the rail (both states are proofs of "not applied"), and a rail answer
-- that later says otherwise holds its amount again.
INSERT INTO intent_edges (from_state, event, to_state) VALUES
    ('FAILED_TERMINAL', 'HOLD_REJECTED', 'BLOCKED'),
    ('CONFIRMED_NOT_APPLIED', 'HOLD_REJECTED', 'BLOCKED');

-- +goose Down
DELETE FROM intent_edges WHERE event = 'HOLD_REJECTED' AND from_state IN ('FAILED_TERMINAL', 'CONFIRMED_NOT_APPLIED');
