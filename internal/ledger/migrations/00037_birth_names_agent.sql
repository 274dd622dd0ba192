-- +goose Up
-- An intent's birth record names its agent (I6). Who made an intent
-- decides whose it is: which owner lists it, resolves it and is given
-- proofs of its records. No sealed record covered it, so a database writer
-- could move a sealed intent to another owner's agent and `audit verify`
-- passed (found by a review). The birth record's detail now opens with
-- "agent: <agent id>" (empty for an intent made without one), then, on a
-- line of its own, what it held before (the reason, or "distinct: " and
-- the distinct reason). Agent ids hold no newline, so the first line is
-- the agent's whatever the reason says; verification compares it with the
-- intent's agent_id. A birth record written before this migration names
-- none: verification counts those intents as not covered.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_intent_audit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_from   text := '';
    v_detail text := NEW.reason;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.state = OLD.state THEN
            RETURN NULL;
        END IF;
        v_from := OLD.state;
    ELSE
        IF NEW.distinct_reason <> '' THEN
            v_detail := 'distinct: ' || NEW.distinct_reason;
        END IF;
        v_detail := 'agent: ' || COALESCE(NEW.agent_id, '') || CASE WHEN v_detail <> '' THEN E'\n' || v_detail ELSE '' END;
    END IF;
    INSERT INTO audit_records (rail_account, sik, from_state, to_state, event, attempt_seq, detail, at_micros)
        VALUES (NEW.rail_account, NEW.sik, v_from, NEW.state, NEW.last_event, NEW.attempt_count, v_detail,
                (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- countersign_intent_audit, as 00020 left it.
CREATE OR REPLACE FUNCTION countersign_intent_audit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_from   text := '';
    v_detail text := NEW.reason;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.state = OLD.state THEN
            RETURN NULL;
        END IF;
        v_from := OLD.state;
    ELSIF NEW.distinct_reason <> '' THEN
        v_detail := 'distinct: ' || NEW.distinct_reason;
    END IF;
    INSERT INTO audit_records (rail_account, sik, from_state, to_state, event, attempt_seq, detail, at_micros)
        VALUES (NEW.rail_account, NEW.sik, v_from, NEW.state, NEW.last_event, NEW.attempt_count, v_detail,
                (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
