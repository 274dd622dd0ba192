-- +goose Up
-- Owner console sessions (internal/console, internal/ownerauth). A session is
-- an owner credential like a static token: the browser holds its secret
-- ("css_" + 256 random bits) in an HttpOnly cookie, and only the SHA-256 of
-- it is kept here, so a reader of this table cannot act as any owner. It is
-- in Postgres, not in a process, so every replica honours it and a
-- revocation holds everywhere at once.
--
-- The CSRF token is not stored: it is an HMAC keyed by the session secret
-- (ownerauth.CSRFToken), which only the holder of the cookie can compute.
CREATE TABLE owner_sessions (
    id          text        PRIMARY KEY CHECK (id ~ '^oss_[a-z0-9]{8,64}$'),
    secret_hash bytea       NOT NULL UNIQUE CHECK (length(secret_hash) = 32),
    owner_id    text        NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 128),
    -- The token id ("otk_…") for method token, the OIDC subject for oidc.
    subject     text        NOT NULL CHECK (length(subject) BETWEEN 1 AND 128),
    method      text        NOT NULL CHECK (method IN ('token', 'oidc')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    -- A session lives at most 24 hours (console-session-ttl); an hour of
    -- slack absorbs skew between the deciding process and the database.
    CHECK (expires_at > created_at AND expires_at <= created_at + interval '25 hours'),
    CHECK (method <> 'token' OR subject ~ '^otk_[a-z0-9]{8,64}$')
);

CREATE INDEX owner_sessions_owner ON owner_sessions (owner_id, created_at DESC);
CREATE INDEX owner_sessions_expires ON owner_sessions (expires_at);

-- A session is immutable but for its one-way revocation. Rows may be
-- deleted (a session that has expired is worth nothing), never altered.
-- +goose StatementBegin
CREATE FUNCTION countersign_owner_session_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.revoked_at IS NOT NULL THEN
            RAISE EXCEPTION 'owner session % cannot be created revoked', NEW.id
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF (NEW.id, NEW.secret_hash, NEW.owner_id, NEW.subject, NEW.method, NEW.created_at, NEW.expires_at)
       IS DISTINCT FROM (OLD.id, OLD.secret_hash, OLD.owner_id, OLD.subject, OLD.method, OLD.created_at, OLD.expires_at) THEN
        RAISE EXCEPTION 'owner session % is immutable but for its revocation', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        RAISE EXCEPTION 'revocation of owner session % is one-way', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER owner_sessions_guard BEFORE INSERT OR UPDATE ON owner_sessions
    FOR EACH ROW EXECUTE FUNCTION countersign_owner_session_guard();

-- Keys the console shares between replicas: the AES-GCM key that seals the
-- OIDC sign-in cookie (state, nonce, PKCE verifier). The first replica to
-- need one inserts a random key; every other one reads it.
CREATE TABLE console_keys (
    name        text        PRIMARY KEY CHECK (name ~ '^[a-z0-9_]{1,64}$'),
    key         bytea       NOT NULL CHECK (length(key) = 32),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE console_keys;
DROP TABLE owner_sessions;
DROP FUNCTION countersign_owner_session_guard();
