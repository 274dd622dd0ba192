-- +goose Up
-- An intent born IN_FLIGHT (its gates passed and its first attempt started
-- in the transaction that created it) gets one audit record, its birth:
-- '' → IN_FLIGHT by ATTEMPT_STARTED on attempt 1. It used to get three
-- (PROPOSED, GATES_PASSED, ATTEMPT_STARTED), though no transaction could
-- ever see it PROPOSED or AUTHORIZED: the row is born at the end of that
-- path, and the state machine has exactly one path from nothing to
-- IN_FLIGHT on attempt 1 inside one transaction (PROPOSED --GATES_PASSED-->
-- AUTHORIZED --ATTEMPT_STARTED--> IN_FLIGHT), so the one record loses
-- nothing. I6 reads: every change of a stored intent's state, and every
-- birth, appends exactly one record. It is two thirds less of what every
-- ALLOW wrote to the audit log before its answer (heap, three indexes) and
-- of what the sequencer seals afterwards. An intent born PROPOSED (a HOLD,
-- the locking path) keeps its birth record and one per transition.
--
-- Nothing reads decisions by intent (they are found by request id; an
-- intent's timeline is its audit records and attempts): the index on
-- (rail_account, sik) only cost every decision an index entry.
DROP INDEX decisions_intent_idx;

-- intents_subject_recent (subject, created_at, rail_account, sik) serves
-- every lookup of an account's intents on a subject (the outstanding-refund
-- assertions name both), so intents_subject (rail_account, subject) was a
-- second entry for every intent written and every state it moved to.
DROP INDEX intents_subject;

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

-- +goose Down
CREATE INDEX intents_subject ON intents (rail_account, subject);
CREATE INDEX decisions_intent_idx ON decisions (rail_account, sik) WHERE sik IS NOT NULL;
-- +goose StatementBegin
-- countersign_intent_audit, as 00013 left it.
CREATE OR REPLACE FUNCTION countersign_intent_audit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_from   text := '';
    v_detail text := NEW.reason;
    v_at     bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.state = OLD.state THEN
            RETURN NULL;
        END IF;
        v_from := OLD.state;
    ELSIF NEW.distinct_reason <> '' THEN
        v_detail := 'distinct: ' || NEW.distinct_reason;
    END IF;
    IF TG_OP = 'INSERT' AND NEW.state = 'IN_FLIGHT' THEN
        INSERT INTO audit_records (rail_account, sik, from_state, to_state, event, attempt_seq, detail, at_micros) VALUES
            (NEW.rail_account, NEW.sik, '', 'PROPOSED', 'PROPOSED', 0, v_detail, v_at),
            (NEW.rail_account, NEW.sik, 'PROPOSED', 'AUTHORIZED', 'GATES_PASSED', 0, '', v_at),
            (NEW.rail_account, NEW.sik, 'AUTHORIZED', 'IN_FLIGHT', 'ATTEMPT_STARTED', 1, '', v_at);
        RETURN NULL;
    END IF;
    INSERT INTO audit_records (rail_account, sik, from_state, to_state, event, attempt_seq, detail, at_micros)
        VALUES (NEW.rail_account, NEW.sik, v_from, NEW.state, NEW.last_event, NEW.attempt_count, v_detail,
                (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
