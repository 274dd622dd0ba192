-- +goose Up
-- An intent whose attempt the rail answered "applied" is never
-- CONFIRMED_NOT_APPLIED. The answer can reach the ledger after the lease
-- expired, while the reconciler lists the rail (RECONCILING): the answer
-- is then kept on the attempt (entity_id, set only for an applied answer)
-- and changes no state. A listing that missed the entity (read before
-- the rail wrote it, or from a lagging replica) must not then settle the
-- intent as proven absent: that would void its hold and allow a retry of
-- an action the rail applied. RecordFinding quarantines it instead; this
-- trigger refuses the state whatever the writer.
-- +goose StatementBegin
CREATE FUNCTION countersign_absent_unanswered() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_seq    integer;
    v_entity text;
BEGIN
    SELECT attempt_seq, entity_id INTO v_seq, v_entity FROM attempts
        WHERE rail_account = NEW.rail_account AND sik = NEW.sik AND entity_id IS NOT NULL
        ORDER BY attempt_seq LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'intent % %: CONFIRMED_NOT_APPLIED, but the rail answered attempt % applied (entity %)',
            NEW.rail_account, NEW.sik, v_seq, v_entity USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- Only on the way into CONFIRMED_NOT_APPLIED: the WHEN keeps every other
-- update of an intent (every ALLOW's commit among them) from calling it.
CREATE TRIGGER intents_absent_unanswered BEFORE UPDATE OF state ON intents
    FOR EACH ROW WHEN (NEW.state = 'CONFIRMED_NOT_APPLIED' AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION countersign_absent_unanswered();

-- +goose Down
DROP TRIGGER intents_absent_unanswered ON intents;
DROP FUNCTION countersign_absent_unanswered();
