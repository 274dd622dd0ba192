-- +goose Up
-- Mandates (DESIGN.md §7): an owner's grant of spending authority to one agent
-- on one rail account. A mandate is identified by the SHA-256 of its canonical
-- JSON (internal/mandate), immutable once stored, and revocable one way. The
-- columns beside `canonical` repeat what the gates select on; the insert guard
-- checks them against the canonical document so they can never disagree with
-- the policy the hash names.

CREATE TABLE mandates (
    hash           text        PRIMARY KEY CHECK (hash ~ '^[0-9a-f]{64}$'),
    owner_id       text        NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 128),
    agent_id       text        NOT NULL REFERENCES agents (id),
    rail_account   text        NOT NULL CHECK (length(rail_account) BETWEEN 1 AND 255),
    -- The exact RFC 8785 bytes that were hashed: text, not jsonb, because
    -- jsonb would reorder keys and respell numbers.
    canonical      text        NOT NULL CHECK (length(canonical) <= 1048576),
    mode           text        NOT NULL CHECK (mode IN ('approval_required', 'budgeted')),
    valid_from     timestamptz NOT NULL,
    valid_until    timestamptz NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz,
    revoke_reason  text,
    CHECK (valid_until > valid_from),
    CHECK (hash = encode(sha256(convert_to(canonical, 'UTF8')), 'hex')),
    CHECK ((revoked_at IS NULL) = (revoke_reason IS NULL)),
    CHECK (revoke_reason IS NULL OR length(revoke_reason) BETWEEN 1 AND 1000),
    CHECK (revoked_at IS NULL OR revoked_at >= created_at)
);

-- The gate's lookup: the newest unrevoked mandate of an agent on a rail account.
CREATE INDEX mandates_active ON mandates (agent_id, rail_account, created_at DESC)
    WHERE revoked_at IS NULL;
CREATE INDEX mandates_owner ON mandates (owner_id, created_at DESC);
CREATE INDEX mandates_agent ON mandates (agent_id, created_at DESC);

-- Insert: the selection columns must be the canonical document's own values,
-- the owner must own the agent, and a mandate is born unrevoked.
-- Update: only the one-way revocation (revoked_at and revoke_reason from NULL
-- to a value, once). Delete: never.
-- +goose StatementBegin
CREATE FUNCTION countersign_mandate_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    doc jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'mandate % is immutable: DELETE refused (revoke it instead)', OLD.hash
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.hash, NEW.owner_id, NEW.agent_id, NEW.rail_account, NEW.canonical, NEW.mode,
            NEW.valid_from, NEW.valid_until, NEW.created_at)
           IS DISTINCT FROM
           (OLD.hash, OLD.owner_id, OLD.agent_id, OLD.rail_account, OLD.canonical, OLD.mode,
            OLD.valid_from, OLD.valid_until, OLD.created_at) THEN
            RAISE EXCEPTION 'mandate % is immutable: a new policy is a new mandate', OLD.hash
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF OLD.revoked_at IS NOT NULL
           AND (NEW.revoked_at, NEW.revoke_reason) IS DISTINCT FROM (OLD.revoked_at, OLD.revoke_reason) THEN
            RAISE EXCEPTION 'revocation of mandate % is one-way and final', OLD.hash
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;

    IF NEW.revoked_at IS NOT NULL OR NEW.revoke_reason IS NOT NULL THEN
        RAISE EXCEPTION 'mandate % cannot be created revoked', NEW.hash
            USING ERRCODE = 'check_violation';
    END IF;
    BEGIN
        doc := NEW.canonical::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        RAISE EXCEPTION 'mandate %: canonical form is not JSON', NEW.hash
            USING ERRCODE = 'check_violation';
    END;
    IF jsonb_typeof(doc) IS DISTINCT FROM 'object'
       OR doc->>'agent_id' IS DISTINCT FROM NEW.agent_id
       OR doc->>'rail_account' IS DISTINCT FROM NEW.rail_account
       OR lower(substr(doc->>'mode', length('MANDATE_MODE_') + 1)) IS DISTINCT FROM NEW.mode
       OR (doc->>'valid_from')::timestamptz IS DISTINCT FROM NEW.valid_from
       OR (doc->>'valid_until')::timestamptz IS DISTINCT FROM NEW.valid_until THEN
        RAISE EXCEPTION 'mandate %: agent_id, rail_account, mode and validity must be the canonical form''s own', NEW.hash
            USING ERRCODE = 'check_violation';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM agents WHERE id = NEW.agent_id AND owner_id = NEW.owner_id) THEN
        RAISE EXCEPTION 'mandate %: agent % does not belong to owner %', NEW.hash, NEW.agent_id, NEW.owner_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER mandates_guard BEFORE INSERT OR UPDATE OR DELETE ON mandates
    FOR EACH ROW EXECUTE FUNCTION countersign_mandate_guard();
CREATE TRIGGER mandates_no_truncate BEFORE TRUNCATE ON mandates
    FOR EACH STATEMENT EXECUTE FUNCTION countersign_append_only();

-- +goose Down
DROP TABLE mandates;
DROP FUNCTION countersign_mandate_guard();
