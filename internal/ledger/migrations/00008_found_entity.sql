-- +goose Up
-- A refund settled by reconciliation has no 2xx answer of its own (the
-- answer was lost), but the reconciler read the entity from the rail's
-- listing, stamp and all. Keeping it lets a duplicate request be answered
-- with the rail's entity from the ledger, as a duplicate of an APPLIED
-- intent is (DESIGN.md §5), instead of a 409.
ALTER TABLE reconciliation_findings ADD COLUMN entity_body bytea
    CHECK (entity_body IS NULL OR outcome = 'found_applied');

-- +goose Down
ALTER TABLE reconciliation_findings DROP COLUMN entity_body;
