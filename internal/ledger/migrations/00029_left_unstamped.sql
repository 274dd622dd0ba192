-- +goose Up
-- A listing proves an attempt absent only if the request, had it reached
-- the rail, would carry the attempt's body stamp there: the rails show only
-- the body stamp on their entities. The reconciler took "through Envoy and
-- not marked stamped" for "never left", but ext_proc let two kinds of
-- allowed request leave without writing the stamp or the mark: one whose
-- headers end the stream (a Razorpay full refund with no body) and one
-- with no place for the stamp (an MCP tool without a metadata argument).
-- An ambiguous answer to either was then settled CONFIRMED_NOT_APPLIED on
-- a listing that could never show it: the hold voided, a retry allowed,
-- while the rail had applied it (the refund paid twice, a budget spent
-- twice). ext_proc now marks every request it lets leave, in the statement
-- that checks the attempt is live: stamped (body_stamped) or not
-- (left_unstamped). And CONFIRMED_NOT_APPLIED now needs, whatever the
-- writer, an attempt whose absence a listing can show: stamped, or through
-- Envoy and never let leave.
ALTER TABLE attempts ADD COLUMN left_unstamped boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT attempts_stamped_or_not CHECK (NOT (body_stamped AND left_unstamped));

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_absent_unanswered() RETURNS trigger
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
    PERFORM 1 FROM attempts
        WHERE rail_account = NEW.rail_account AND sik = NEW.sik AND attempt_seq = NEW.attempt_count
          AND (body_stamped OR (via_envoy AND NOT left_unstamped));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'intent % %: CONFIRMED_NOT_APPLIED, but attempt % may have reached the rail without its body stamp, so no listing can show it absent',
            NEW.rail_account, NEW.sik, NEW.attempt_count USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_absent_unanswered() RETURNS trigger
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
ALTER TABLE attempts DROP CONSTRAINT attempts_stamped_or_not, DROP COLUMN left_unstamped;
