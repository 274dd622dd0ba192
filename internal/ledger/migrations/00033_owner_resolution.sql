-- +goose Up
-- A QUARANTINED intent leaves only by its owner's resolution, made after
-- checking the rail: RESOLVED_APPLIED (its hold is posted, as on any
-- APPLIED) or RESOLVED_NOT_APPLIED, which ends BLOCKED (its hold is
-- voided; nothing is ever sent again on the owner's word, which is no
-- proof of absence). Before, an intent parked there kept its budget hold
-- and refused its action forever, and its reason told a person to
-- "resolve" it with nothing to resolve it by.
--
-- The resolution is a row of its own, written in the transaction that
-- moves the intent and never changed: who resolved it, what they found and
-- why. The intent moves only with a resolution that matches the event,
-- made by the owner of the intent's agent while it holds the intent's rail
-- account; "not applied" is refused while
-- the rail has answered any of the intent's attempts applied (its entity on
-- the attempt): the rail's word outweighs the owner's.
INSERT INTO intent_edges (from_state, event, to_state) VALUES
    ('QUARANTINED', 'RESOLVED_APPLIED', 'APPLIED'),
    ('QUARANTINED', 'RESOLVED_NOT_APPLIED', 'BLOCKED');

CREATE TABLE intent_resolutions (
    rail_account   text        NOT NULL,
    sik            text        NOT NULL,
    -- Free text, as agents.owner_id (an OIDC owner has no owners row).
    owner_id       text        NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 128),
    outcome        text        NOT NULL CHECK (outcome IN ('applied', 'not_applied')),
    rail_entity_id text        CHECK (rail_entity_id ~ '^[A-Za-z0-9_.:-]{1,255}$'),
    note           text        NOT NULL CHECK (length(note) BETWEEN 1 AND 1000),
    resolved_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rail_account, sik),
    FOREIGN KEY (rail_account, sik) REFERENCES intents (rail_account, sik),
    CHECK ((outcome = 'applied') = (rail_entity_id IS NOT NULL))
);

-- +goose StatementBegin
CREATE FUNCTION countersign_resolution_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the resolution of intent % % is never changed or deleted', OLD.rail_account, OLD.sik
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER intent_resolutions_immutable BEFORE UPDATE OR DELETE ON intent_resolutions
    FOR EACH ROW EXECUTE FUNCTION countersign_resolution_immutable();

-- +goose StatementBegin
CREATE FUNCTION countersign_resolution_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r intent_resolutions%ROWTYPE;
    v_entity text;
BEGIN
    SELECT * INTO r FROM intent_resolutions WHERE rail_account = NEW.rail_account AND sik = NEW.sik;
    IF NOT FOUND OR r.outcome <> (CASE NEW.last_event WHEN 'RESOLVED_APPLIED' THEN 'applied' ELSE 'not_applied' END) THEN
        RAISE EXCEPTION 'intent % %: % needs the owner''s resolution of that outcome', NEW.rail_account, NEW.sik, NEW.last_event
            USING ERRCODE = 'check_violation';
    END IF;
    PERFORM 1 FROM agents a JOIN rail_account_owners g ON g.owner_id = a.owner_id
        WHERE a.id = NEW.agent_id AND a.owner_id = r.owner_id
          AND g.rail_account = NEW.rail_account AND g.revoked_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'intent % %: only the owner of its agent, holding its rail account, resolves it', NEW.rail_account, NEW.sik
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.last_event = 'RESOLVED_APPLIED' THEN
        IF NEW.rail_entity_id IS DISTINCT FROM r.rail_entity_id OR NEW.attempt_count < 1
           OR NEW.applied_attempt_seq IS DISTINCT FROM NEW.attempt_count THEN
            RAISE EXCEPTION 'intent % %: resolved applied as the resolution''s entity, on its latest attempt', NEW.rail_account, NEW.sik
                USING ERRCODE = 'check_violation';
        END IF;
    ELSE
        SELECT entity_id INTO v_entity FROM attempts
            WHERE rail_account = NEW.rail_account AND sik = NEW.sik AND entity_id IS NOT NULL LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'intent % %: the rail answered an attempt applied (entity %); it cannot be resolved not applied',
                NEW.rail_account, NEW.sik, v_entity USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER intents_resolution_guard BEFORE UPDATE OF state ON intents
    FOR EACH ROW WHEN (OLD.state = 'QUARANTINED' AND NEW.state IS DISTINCT FROM OLD.state)
    EXECUTE FUNCTION countersign_resolution_guard();

-- +goose Down
DROP TRIGGER intents_resolution_guard ON intents;
DROP FUNCTION countersign_resolution_guard();
DROP TABLE intent_resolutions;
DROP FUNCTION countersign_resolution_immutable();
DELETE FROM intent_edges WHERE from_state = 'QUARANTINED';
