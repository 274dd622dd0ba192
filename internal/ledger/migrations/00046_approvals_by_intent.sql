-- +goose Up
-- (00045 was a decide-path change reverted before it shipped: its number
-- is left unused, so that a ledger which ran it runs this one.)
--
-- An intent's replaced approvals: each time the same request comes with
-- other labels (other metadata) its live approval is voided and another
-- opened, and an intent may have at most ledger.MaxReplacedApprovals so
-- voided (an agent re-sending one held refund with fresh metadata at its
-- decision rate stored a 28 KB approval row each time: found by a
-- review). Counted here rather than by scanning every approval.
CREATE INDEX approvals_intent_void ON approvals (rail_account, sik) WHERE state = 'void';

-- +goose Down
DROP INDEX approvals_intent_void;
