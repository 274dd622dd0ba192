-- +goose Up
-- Approvals (DESIGN.md §5): a HELD intent waits for its owner to approve
-- that exact request. The approval is bound to the request's fingerprint
-- (the SHA-256 of the intent's canonical action, so a request that differs
-- by one minor unit, in currency, payee or by an omitted amount is another
-- intent and another approval), expires, and is used at most once, when the
-- identical request passes the gates again.

CREATE TABLE approvals (
    id           text        PRIMARY KEY CHECK (id ~ '^apr_[a-z0-9]{8,64}$'),
    rail_account text        NOT NULL,
    sik          text        NOT NULL,
    owner_id     text        NOT NULL,
    agent_id     text        NOT NULL REFERENCES agents (id),
    mandate_hash text        NOT NULL DEFAULT '',
    fingerprint  text        NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    gates        jsonb       NOT NULL DEFAULT '[]'::jsonb,
    state        text        NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'approved', 'rejected', 'expired', 'used', 'void')),
    note         text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    decided_at   timestamptz,
    FOREIGN KEY (rail_account, sik) REFERENCES intents (rail_account, sik),
    CHECK (expires_at > created_at),
    CHECK ((state = 'pending') = (decided_at IS NULL))
);

-- At most one live approval per intent.
CREATE UNIQUE INDEX approvals_live ON approvals (rail_account, sik) WHERE state IN ('pending', 'approved');
CREATE INDEX approvals_owner ON approvals (owner_id, state, id);

-- +goose StatementBegin
-- countersign_approval_guard: pending → approved | rejected | expired |
-- void; approved → used | expired | void; the rest are final. The binding
-- (intent, fingerprint, owner) never changes.
CREATE FUNCTION countersign_approval_guard() RETURNS trigger
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

CREATE TRIGGER approvals_guard BEFORE UPDATE OR DELETE ON approvals
    FOR EACH ROW EXECUTE FUNCTION countersign_approval_guard();

-- +goose Down
DROP TABLE approvals;
DROP FUNCTION countersign_approval_guard();
