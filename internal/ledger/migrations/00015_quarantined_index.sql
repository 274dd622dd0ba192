-- +goose Up
-- The quarantined intents are what an operator must look at, and the
-- server's /metrics counts them on every scrape. They are few and the
-- intents table is large: a partial index makes the count read only them.
CREATE INDEX intents_quarantined ON intents (rail_account, sik) WHERE state = 'QUARANTINED';

-- +goose Down
DROP INDEX intents_quarantined;
