-- +goose Up
-- A claim takes, for each live webhook, its own oldest due deliveries (so
-- that one owner's backlog cannot keep another's events out of a batch).
-- It read them from outbox_deliveries_webhook, which holds dead letters
-- too and orders by event, so a fixed-size scan could fill with dead
-- letters and backing-off deliveries and miss the due ones behind them: a
-- webhook with enough dead letters lost its share of every claim (found by
-- a review). This index holds pending deliveries only, in the order they
-- fall due, so the claim reads a webhook's due deliveries first and
-- nothing else.
CREATE INDEX outbox_deliveries_webhook_due ON outbox_deliveries (webhook_id, next_attempt_at, outbox_id) WHERE state = 'pending';

-- +goose Down
DROP INDEX outbox_deliveries_webhook_due;
