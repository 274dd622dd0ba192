-- +goose Up
-- Foundation schema: the agents and credentials that authenticate an agent's
-- calls, and an append-only record of every decision Countersign answers.

CREATE TABLE agents (
    id          text        PRIMARY KEY CHECK (id ~ '^agt_[a-z0-9]{8,64}$'),
    owner_id    text        NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 128),
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    status      text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    CHECK ((status = 'revoked') = (revoked_at IS NOT NULL))
);

CREATE INDEX agents_owner ON agents (owner_id, id);

-- A credential is stored only as the SHA-256 of its secret. The secret carries
-- 256 random bits, so a fast hash is enough and keeps the lookup on the hot path cheap.
CREATE TABLE credentials (
    id           text        PRIMARY KEY CHECK (id ~ '^crd_[a-z0-9]{8,64}$'),
    agent_id     text        NOT NULL REFERENCES agents (id),
    secret_hash  bytea       NOT NULL UNIQUE CHECK (length(secret_hash) = 32),
    scope        text        NOT NULL CHECK (scope IN ('propose', 'execute')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    CHECK (expires_at > created_at)
);

CREATE INDEX credentials_agent ON credentials (agent_id, id);

-- Revocation is one-way: once revoked_at is set it can never be cleared or moved,
-- and an agent never comes back from 'revoked'.
-- +goose StatementBegin
CREATE FUNCTION countersign_one_way_revocation() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        RAISE EXCEPTION 'revocation of % % is one-way', TG_TABLE_NAME, OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.id IS DISTINCT FROM OLD.id THEN
        RAISE EXCEPTION 'the id of % % is immutable', TG_TABLE_NAME, OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER agents_one_way BEFORE UPDATE ON agents
    FOR EACH ROW EXECUTE FUNCTION countersign_one_way_revocation();
CREATE TRIGGER credentials_one_way BEFORE UPDATE ON credentials
    FOR EACH ROW EXECUTE FUNCTION countersign_one_way_revocation();

-- Every answer Countersign gives, allow or not, is recorded here before the
-- answer leaves. Rows are never changed or removed.
CREATE TABLE decisions (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    decided_at     timestamptz NOT NULL DEFAULT now(),
    request_id     text        NOT NULL,
    source         text        NOT NULL CHECK (source IN ('ext_authz', 'decide')),
    agent_id       text        REFERENCES agents (id),
    credential_id  text        REFERENCES credentials (id),
    verdict        text        NOT NULL CHECK (verdict IN ('ALLOW', 'HOLD', 'BLOCK')),
    reason_code    text        NOT NULL CHECK (reason_code ~ '^[a-z][a-z0-9_]*$'),
    reason         text        NOT NULL,
    method         text        NOT NULL DEFAULT '',
    host           text        NOT NULL DEFAULT '',
    path           text        NOT NULL DEFAULT '',
    gates          jsonb       NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(gates) = 'array'),
    CHECK (credential_id IS NULL OR agent_id IS NOT NULL)
);

CREATE INDEX decisions_agent ON decisions (agent_id, decided_at);
CREATE INDEX decisions_request ON decisions (request_id);

-- +goose StatementBegin
CREATE FUNCTION countersign_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER decisions_append_only BEFORE UPDATE OR DELETE ON decisions
    FOR EACH ROW EXECUTE FUNCTION countersign_append_only();
CREATE TRIGGER decisions_no_truncate BEFORE TRUNCATE ON decisions
    FOR EACH STATEMENT EXECUTE FUNCTION countersign_append_only();

-- +goose Down
DROP TABLE decisions;
DROP TABLE credentials;
DROP TABLE agents;
DROP FUNCTION countersign_append_only();
DROP FUNCTION countersign_one_way_revocation();
