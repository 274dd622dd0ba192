-- +goose Up
-- A listing proves an attempt absent only once the rail can no longer
-- apply it. The reconciler listed 2 s after an attempt's lease (30 s) ran
-- out, or after a timeout's answer, while Envoy gives the rail call 60 s
-- and a rail goes on with a request whose client gave up: a request still
-- at the rail was settled CONFIRMED_NOT_APPLIED, its hold voided and its
-- room spent again, and then it applied (found by a review: 1999 refunded
-- under a budget of 1000; one refund paid twice once its key expired).
--
-- An attempt now carries the time until which the rail may still apply it
-- (may_apply_until): when ext_proc lets its request leave, that time plus
-- the rail's settle time (`--rail-settle-time`: the rail route's timeout
-- and what the rail may take after its client gave up); for an attempt
-- that leaves without ext_proc's mark (ext_authz alone, native), the end
-- of its lease plus the same. An intent moving to UNKNOWN is scheduled for
-- reconciliation no earlier than that plus its reconcile delay, whatever
-- the writer, and the
-- database refuses a listing's proof of absence recorded before it. An
-- attempt never let leave has none: it is settled without a listing.
ALTER TABLE attempts ADD COLUMN may_apply_until timestamptz;

-- +goose StatementBegin
CREATE FUNCTION countersign_reconcile_after_the_rail() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_until timestamptz;
BEGIN
    SELECT may_apply_until INTO v_until FROM attempts
        WHERE rail_account = NEW.rail_account AND sik = NEW.sik AND attempt_seq = NEW.attempt_count;
    -- The listing still needs its reconcile delay (the rails have no
    -- read-your-writes) after the rail is done: the delay asked for is
    -- counted from may_apply_until, not from now.
    IF v_until IS NOT NULL AND NEW.next_reconcile_at IS NOT NULL AND v_until > now() THEN
        NEW.next_reconcile_at := v_until + GREATEST(NEW.next_reconcile_at - now(), interval '0');
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER intents_reconcile_after_the_rail BEFORE UPDATE OF state ON intents
    FOR EACH ROW WHEN (NEW.state = 'UNKNOWN' AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION countersign_reconcile_after_the_rail();

-- +goose StatementBegin
CREATE FUNCTION countersign_absence_after_the_rail() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_until timestamptz;
BEGIN
    SELECT may_apply_until INTO v_until FROM attempts
        WHERE rail_account = NEW.rail_account AND sik = NEW.sik AND attempt_seq = NEW.attempt_seq;
    IF v_until IS NOT NULL AND now() < v_until THEN
        RAISE EXCEPTION 'attempt %/%#% may still apply at the rail until %: no listing before then proves it absent',
            NEW.rail_account, NEW.sik, NEW.attempt_seq, v_until USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER findings_absence_after_the_rail BEFORE INSERT ON reconciliation_findings
    FOR EACH ROW WHEN (NEW.outcome = 'confirmed_absent' AND NOT NEW.never_sent)
    EXECUTE FUNCTION countersign_absence_after_the_rail();

-- +goose Down
DROP TRIGGER findings_absence_after_the_rail ON reconciliation_findings;
DROP FUNCTION countersign_absence_after_the_rail();
DROP TRIGGER intents_reconcile_after_the_rail ON intents;
DROP FUNCTION countersign_reconcile_after_the_rail();
ALTER TABLE attempts DROP COLUMN may_apply_until;
