-- +goose Up
-- A mandate's idempotency window made identical payouts (transfers,
-- captures) within it one action by folding a fixed slot of time, counted
-- from the Unix epoch, into the key. An agent knows where the slots end:
-- an identical payout sent a second after a boundary was a new intent
-- with a new key, even while the first was still unresolved (UNKNOWN
-- after a timeout), so one payout could be sent twice, and the rail would
-- not deduplicate it (a new idempotency key). The key now names a
-- generation of its family (the request as the agent sends it: its
-- alias) instead of a slot: a request is the family's newest intent while
-- that intent is unresolved or younger than the window, and a new
-- generation only after. Deciders that read the same newest intent key
-- the same generation, so the intent's primary key makes concurrent
-- identical requests one intent. family is set on a windowed intent's
-- birth and never changes.
ALTER TABLE intents ADD COLUMN family text CHECK (family ~ '^[A-Z2-7]{32}$');
CREATE INDEX intents_family ON intents (rail_account, family, created_at DESC) WHERE family IS NOT NULL;

-- +goose StatementBegin
CREATE FUNCTION countersign_intent_family_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'intent % %: its family is fixed at its birth', OLD.rail_account, OLD.sik
        USING ERRCODE = 'check_violation';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER intents_family_fixed BEFORE UPDATE OF family ON intents
    FOR EACH ROW WHEN (OLD.family IS DISTINCT FROM NEW.family)
    EXECUTE FUNCTION countersign_intent_family_fixed();

-- +goose Down
DROP TRIGGER intents_family_fixed ON intents;
DROP FUNCTION countersign_intent_family_fixed();
DROP INDEX intents_family;
ALTER TABLE intents DROP COLUMN family;
