-- +goose Up
-- Fewer writes per decision, no invariant weaker (issue: the decide path at
-- the speed of the ledger).

-- An intent's state was a foreign key into intent_states: every insert and
-- state change then locked that state's row (FOR KEY SHARE), so concurrent
-- decisions wrote a lock record each and shared a handful of rows as
-- multixacts. The same set of values is a CHECK; the state machine's edges
-- are still checked against intent_edges by countersign_intent_guard.
ALTER TABLE intents DROP CONSTRAINT intents_state_fkey;
ALTER TABLE intents ADD CONSTRAINT intents_state_known CHECK (state IN (
    'PROPOSED', 'AUTHORIZED', 'IN_FLIGHT', 'APPLIED', 'FAILED_TERMINAL', 'UNKNOWN',
    'RECONCILING', 'CONFIRMED_NOT_APPLIED', 'HELD', 'BLOCKED', 'QUARANTINED'));

-- Indexes whose every lookup another index serves: (rail_account, subject)
-- for the open intents of a subject, and the primary key's (rail_account,
-- sik) prefix for the holds of an intent.
DROP INDEX intents_open_subject;
DROP INDEX holds_open;
-- Nothing reads decisions by agent and time (the owner API lists intents
-- and approvals; decisions are found by request id or intent).
DROP INDEX decisions_agent;

-- The sliding windows count a mandate's holds of one agent or payee since
-- a time, under the mandate's lock: carrying the amount and currency in
-- the index lets PostgreSQL count without visiting the table.
DROP INDEX holds_mandate_agent;
DROP INDEX holds_mandate_payee;
CREATE INDEX holds_mandate_agent ON budget_holds (mandate_hash, agent_id, created_at) INCLUDE (amount_minor, currency) WHERE state <> 'voided';
CREATE INDEX holds_mandate_payee ON budget_holds (mandate_hash, payee_key, created_at) INCLUDE (amount_minor, currency) WHERE state <> 'voided';


-- +goose StatementBegin
-- countersign_intent_guard, as before, and an intent may be born IN_FLIGHT.
CREATE OR REPLACE FUNCTION countersign_intent_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'intents are never deleted (% %)', OLD.rail_account, OLD.sik
            USING ERRCODE = 'insufficient_privilege';
    END IF;

    IF TG_OP = 'INSERT' THEN
        -- Born PROPOSED; or, for a new intent whose gates passed in the
        -- writing transaction, born at the end of its first path
        -- PROPOSED --GATES_PASSED--> AUTHORIZED --ATTEMPT_STARTED-->
        -- IN_FLIGHT on attempt 1 (one row version instead of three; the
        -- audit trigger writes a record for each of the three).
        IF NOT ((NEW.state = 'PROPOSED' AND NEW.last_event = 'PROPOSED' AND NEW.attempt_count = 0)
                OR (NEW.state = 'IN_FLIGHT' AND NEW.last_event = 'ATTEMPT_STARTED' AND NEW.attempt_count = 1))
           OR NEW.stamp_generation <> 0 OR NEW.reconcile_count <> 0 OR NEW.applied_attempt_seq IS NOT NULL THEN
            RAISE EXCEPTION 'an intent is born PROPOSED, or IN_FLIGHT on its first attempt, not % (%)', NEW.state, NEW.last_event
                USING ERRCODE = 'check_violation';
        END IF;
    ELSE
        IF OLD.state IN ('APPLIED', 'BLOCKED') THEN
            RAISE EXCEPTION 'intent % % is % and absorbing: no change allowed', OLD.rail_account, OLD.sik, OLD.state
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.rail_account IS DISTINCT FROM OLD.rail_account OR NEW.sik IS DISTINCT FROM OLD.sik
           OR NEW.canonical IS DISTINCT FROM OLD.canonical OR NEW.amount_minor IS DISTINCT FROM OLD.amount_minor
           OR NEW.currency IS DISTINCT FROM OLD.currency OR NEW.subject IS DISTINCT FROM OLD.subject
           OR NEW.action IS DISTINCT FROM OLD.action OR NEW.rail IS DISTINCT FROM OLD.rail
           OR NEW.created_at IS DISTINCT FROM OLD.created_at THEN
            RAISE EXCEPTION 'the action of intent % % is immutable', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.attempt_count < OLD.attempt_count OR NEW.stamp_generation < OLD.stamp_generation
           OR NEW.reconcile_count < OLD.reconcile_count THEN
            RAISE EXCEPTION 'intent % % counters only increase', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.stamp_generation > OLD.stamp_generation AND NOT (OLD.state = 'FAILED_TERMINAL' AND NEW.last_event = 'REOPENED') THEN
            RAISE EXCEPTION 'the stamp generation of % % changes only when a FAILED_TERMINAL intent is reopened', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.state = OLD.state THEN
            -- Not a transition (e.g. a reconciler lease or schedule): nothing to audit.
            IF NEW.attempt_count <> OLD.attempt_count OR NEW.stamp_generation <> OLD.stamp_generation THEN
                RAISE EXCEPTION 'intent % % changed its attempt or stamp without a transition', OLD.rail_account, OLD.sik
                    USING ERRCODE = 'check_violation';
            END IF;
            NEW.last_event := OLD.last_event;
            NEW.updated_at := now();
            RETURN NEW;
        END IF;
        PERFORM 1 FROM intent_edges
            WHERE from_state = OLD.state AND event = NEW.last_event AND to_state = NEW.state;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'illegal transition of % %: % --%--> %', OLD.rail_account, OLD.sik, OLD.state, NEW.last_event, NEW.state
                USING ERRCODE = 'check_violation';
        END IF;
        -- I5: an attempt starts only on AUTHORIZED -> IN_FLIGHT, and it is the next one.
        IF (NEW.last_event = 'ATTEMPT_STARTED') <> (NEW.attempt_count = OLD.attempt_count + 1) THEN
            RAISE EXCEPTION 'intent % %: attempt_count must grow by one exactly when an attempt starts', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.state = 'CONFIRMED_NOT_APPLIED' THEN
            PERFORM 1 FROM reconciliation_findings f
                WHERE f.rail_account = NEW.rail_account AND f.sik = NEW.sik
                  AND f.attempt_seq = NEW.attempt_count
                  AND f.outcome = 'confirmed_absent' AND f.pagination_exhausted;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'intent % %: CONFIRMED_NOT_APPLIED needs an exhaustive confirmed_absent finding for attempt %',
                    NEW.rail_account, NEW.sik, NEW.attempt_count USING ERRCODE = 'check_violation';
            END IF;
        END IF;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- countersign_intent_audit, as 00011 left it, and an intent born IN_FLIGHT
-- (countersign_intent_guard) gets the three records of its first path,
-- exactly as if it had been inserted PROPOSED and moved twice: I6 holds
-- per transition, not per row version.
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
        VALUES (NEW.rail_account, NEW.sik, v_from, NEW.state, NEW.last_event, NEW.attempt_count, v_detail, v_at);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
-- +goose Down
CREATE INDEX decisions_agent ON decisions (agent_id, decided_at);
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

DROP INDEX holds_mandate_agent;
DROP INDEX holds_mandate_payee;
CREATE INDEX holds_mandate_agent ON budget_holds (mandate_hash, agent_id, created_at) WHERE state <> 'voided';
CREATE INDEX holds_mandate_payee ON budget_holds (mandate_hash, payee_key, created_at) WHERE state <> 'voided';
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_intent_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'intents are never deleted (% %)', OLD.rail_account, OLD.sik
            USING ERRCODE = 'insufficient_privilege';
    END IF;

    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'PROPOSED' OR NEW.last_event <> 'PROPOSED' THEN
            RAISE EXCEPTION 'an intent is born PROPOSED, not %', NEW.state USING ERRCODE = 'check_violation';
        END IF;
    ELSE
        IF OLD.state IN ('APPLIED', 'BLOCKED') THEN
            RAISE EXCEPTION 'intent % % is % and absorbing: no change allowed', OLD.rail_account, OLD.sik, OLD.state
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.rail_account IS DISTINCT FROM OLD.rail_account OR NEW.sik IS DISTINCT FROM OLD.sik
           OR NEW.canonical IS DISTINCT FROM OLD.canonical OR NEW.amount_minor IS DISTINCT FROM OLD.amount_minor
           OR NEW.currency IS DISTINCT FROM OLD.currency OR NEW.subject IS DISTINCT FROM OLD.subject
           OR NEW.action IS DISTINCT FROM OLD.action OR NEW.rail IS DISTINCT FROM OLD.rail
           OR NEW.created_at IS DISTINCT FROM OLD.created_at THEN
            RAISE EXCEPTION 'the action of intent % % is immutable', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.attempt_count < OLD.attempt_count OR NEW.stamp_generation < OLD.stamp_generation
           OR NEW.reconcile_count < OLD.reconcile_count THEN
            RAISE EXCEPTION 'intent % % counters only increase', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.stamp_generation > OLD.stamp_generation AND NOT (OLD.state = 'FAILED_TERMINAL' AND NEW.last_event = 'REOPENED') THEN
            RAISE EXCEPTION 'the stamp generation of % % changes only when a FAILED_TERMINAL intent is reopened', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.state = OLD.state THEN
            -- Not a transition (e.g. a reconciler lease or schedule): nothing to audit.
            IF NEW.attempt_count <> OLD.attempt_count OR NEW.stamp_generation <> OLD.stamp_generation THEN
                RAISE EXCEPTION 'intent % % changed its attempt or stamp without a transition', OLD.rail_account, OLD.sik
                    USING ERRCODE = 'check_violation';
            END IF;
            NEW.last_event := OLD.last_event;
            NEW.updated_at := now();
            RETURN NEW;
        END IF;
        PERFORM 1 FROM intent_edges
            WHERE from_state = OLD.state AND event = NEW.last_event AND to_state = NEW.state;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'illegal transition of % %: % --%--> %', OLD.rail_account, OLD.sik, OLD.state, NEW.last_event, NEW.state
                USING ERRCODE = 'check_violation';
        END IF;
        -- I5: an attempt starts only on AUTHORIZED -> IN_FLIGHT, and it is the next one.
        IF (NEW.last_event = 'ATTEMPT_STARTED') <> (NEW.attempt_count = OLD.attempt_count + 1) THEN
            RAISE EXCEPTION 'intent % %: attempt_count must grow by one exactly when an attempt starts', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.state = 'CONFIRMED_NOT_APPLIED' THEN
            PERFORM 1 FROM reconciliation_findings f
                WHERE f.rail_account = NEW.rail_account AND f.sik = NEW.sik
                  AND f.attempt_seq = NEW.attempt_count
                  AND f.outcome = 'confirmed_absent' AND f.pagination_exhausted;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'intent % %: CONFIRMED_NOT_APPLIED needs an exhaustive confirmed_absent finding for attempt %',
                    NEW.rail_account, NEW.sik, NEW.attempt_count USING ERRCODE = 'check_violation';
            END IF;
        END IF;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE INDEX holds_open ON budget_holds (rail_account, sik) WHERE state = 'held';
CREATE INDEX intents_open_subject ON intents (rail_account, subject) WHERE state IN ('IN_FLIGHT', 'UNKNOWN', 'RECONCILING');
ALTER TABLE intents DROP CONSTRAINT intents_state_known;
ALTER TABLE intents ADD CONSTRAINT intents_state_fkey FOREIGN KEY (state) REFERENCES intent_states;
