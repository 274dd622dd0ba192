-- +goose Up
-- Owners and their static API tokens (DESIGN.md §7). A static token is for
-- bootstrap and automation; owners who sign in through OIDC have no row here
-- (their owner id is "oidc:<issuer tag>:<subject>", see internal/ownerauth).
-- agents.owner_id therefore stays free text and has no foreign key to owners.

CREATE TABLE owners (
    id          text        PRIMARY KEY CHECK (id ~ '^own_[a-z0-9]{8,64}$'),
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A token is stored only as the SHA-256 of its secret ("cso_" + 256 random
-- bits): like agent credentials, a fast hash is enough for a secret that long.
CREATE TABLE owner_tokens (
    id          text        PRIMARY KEY CHECK (id ~ '^otk_[a-z0-9]{8,64}$'),
    owner_id    text        NOT NULL REFERENCES owners (id),
    token_hash  bytea       NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    -- No ordering check on revoked_at: a revocation must succeed even if the
    -- database clock has stepped back since the token was issued.
    CHECK (expires_at > created_at)
);

CREATE INDEX owner_tokens_owner ON owner_tokens (owner_id, created_at DESC);

-- A token is immutable but for its one-way revocation, and never deleted (the
-- audit of who could call the owner API outlives the token).
-- +goose StatementBegin
CREATE FUNCTION countersign_owner_token_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'owner token % is never deleted (revoke it instead)', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.revoked_at IS NOT NULL THEN
            RAISE EXCEPTION 'owner token % cannot be created revoked', NEW.id
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF (NEW.id, NEW.owner_id, NEW.token_hash, NEW.created_at, NEW.expires_at)
       IS DISTINCT FROM (OLD.id, OLD.owner_id, OLD.token_hash, OLD.created_at, OLD.expires_at) THEN
        RAISE EXCEPTION 'owner token % is immutable but for its revocation', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        RAISE EXCEPTION 'revocation of owner token % is one-way', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER owner_tokens_guard BEFORE INSERT OR UPDATE OR DELETE ON owner_tokens
    FOR EACH ROW EXECUTE FUNCTION countersign_owner_token_guard();
CREATE TRIGGER owner_tokens_no_truncate BEFORE TRUNCATE ON owner_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION countersign_append_only();

-- +goose Down
DROP TABLE owner_tokens;
DROP FUNCTION countersign_owner_token_guard();
DROP TABLE owners;
