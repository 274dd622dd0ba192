-- +goose Up
-- The owner API lists intents on one subject (a refund's payment, a
-- payout's destination), newest first, with or without a rail account.
-- intents_subject (rail_account, subject) serves a lookup that names the
-- account; this one serves the subject alone, in the listing's order, so
-- the filter reads the subject's intents only instead of every intent of
-- the owner's agents.
CREATE INDEX intents_subject_recent ON intents (subject, created_at DESC, rail_account DESC, sik DESC);

-- +goose Down
DROP INDEX intents_subject_recent;
