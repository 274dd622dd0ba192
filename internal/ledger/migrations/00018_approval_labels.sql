-- +goose Up
-- An approval covers the exact request, labels included (DESIGN §5: "a
-- changed request is a new HOLD"). Labels (metadata, notes, description, a
-- refund's reason) stay out of the SIK, so the intent is one whatever they
-- say; the approval records the held request's labels as canonical JSON
-- (RFC 8785) and is used only by a request carrying the same ones. A
-- request with other labels voids the live approval and opens a new one.
-- Approvals opened before this migration cover no labels ('{}').

ALTER TABLE approvals ADD COLUMN labels text NOT NULL DEFAULT '{}' CHECK (labels LIKE '{%}');

-- +goose StatementBegin
-- countersign_approval_guard, as in 00007, with labels part of the binding.
CREATE OR REPLACE FUNCTION countersign_approval_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'approvals are never deleted' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (NEW.id, NEW.rail_account, NEW.sik, NEW.owner_id, NEW.agent_id, NEW.fingerprint, NEW.labels, NEW.created_at, NEW.expires_at)
       IS DISTINCT FROM (OLD.id, OLD.rail_account, OLD.sik, OLD.owner_id, OLD.agent_id, OLD.fingerprint, OLD.labels, OLD.created_at, OLD.expires_at) THEN
        RAISE EXCEPTION 'approval % is bound to its request' , OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = OLD.state THEN
        RETURN NEW;
    END IF;
    IF NOT ((OLD.state = 'pending' AND NEW.state IN ('approved', 'rejected', 'expired', 'void'))
         OR (OLD.state = 'approved' AND NEW.state IN ('used', 'expired', 'void'))) THEN
        RAISE EXCEPTION 'approval % cannot go from % to %', OLD.id, OLD.state, NEW.state USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = 'used' AND now() >= OLD.expires_at THEN
        RAISE EXCEPTION 'approval % expired at %', OLD.id, OLD.expires_at USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.state = 'pending' THEN
        NEW.decided_at := now();
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- countersign_approval_guard, as in 00007.
CREATE OR REPLACE FUNCTION countersign_approval_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'approvals are never deleted' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (NEW.id, NEW.rail_account, NEW.sik, NEW.owner_id, NEW.agent_id, NEW.fingerprint, NEW.created_at, NEW.expires_at)
       IS DISTINCT FROM (OLD.id, OLD.rail_account, OLD.sik, OLD.owner_id, OLD.agent_id, OLD.fingerprint, OLD.created_at, OLD.expires_at) THEN
        RAISE EXCEPTION 'approval % is bound to its request' , OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = OLD.state THEN
        RETURN NEW;
    END IF;
    IF NOT ((OLD.state = 'pending' AND NEW.state IN ('approved', 'rejected', 'expired', 'void'))
         OR (OLD.state = 'approved' AND NEW.state IN ('used', 'expired', 'void'))) THEN
        RAISE EXCEPTION 'approval % cannot go from % to %', OLD.id, OLD.state, NEW.state USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = 'used' AND now() >= OLD.expires_at THEN
        RAISE EXCEPTION 'approval % expired at %', OLD.id, OLD.expires_at USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.state = 'pending' THEN
        NEW.decided_at := now();
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

ALTER TABLE approvals DROP COLUMN labels;
