-- +goose Up
-- Rail accounts belong to owners (DESIGN.md §11). The operator grants a rail
-- account to an owner (`countersign owner grant-account`, which writes this
-- table straight through the database URL); an owner may put a mandate only
-- on an account it holds, and reads only the audit of accounts it holds.
-- Nothing an owner or an agent can call grants an account: a first-come
-- claim would let a second owner of the deployment squat the first one's
-- account, mandate its own agents on it and read its audit.
--
-- No grant is derived from mandates stored before this migration: those
-- could be exactly such a squat. After upgrading, the operator grants each
-- account to its owners; until then new mandates on it are refused, and the
-- mandates already stored stop deciding (see activeMandate in the ledger).

CREATE TABLE rail_account_owners (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rail_account text        NOT NULL CHECK (length(rail_account) BETWEEN 1 AND 255),
    -- "own_…" (a token owner) or "oidc:<issuer tag>:<subject>": free text,
    -- like agents.owner_id, because OIDC owners have no owners row.
    owner_id     text        NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 128),
    granted_at   timestamptz NOT NULL DEFAULT now(),
    granted_by   text        NOT NULL DEFAULT current_user CHECK (length(granted_by) BETWEEN 1 AND 200),
    revoked_at   timestamptz,
    revoked_by   text        CHECK (revoked_by IS NULL OR length(revoked_by) BETWEEN 1 AND 200),
    CHECK ((revoked_at IS NULL) = (revoked_by IS NULL))
);

-- At most one live grant per (account, owner); a revoked grant stays as
-- history and a new grant is a new row.
CREATE UNIQUE INDEX rail_account_owners_live ON rail_account_owners (rail_account, owner_id)
    WHERE revoked_at IS NULL;
CREATE INDEX rail_account_owners_owner ON rail_account_owners (owner_id) WHERE revoked_at IS NULL;

-- A grant is immutable but for its one-way revocation, and never deleted:
-- who could mandate on an account, and when, outlives the grant.
-- +goose StatementBegin
CREATE FUNCTION countersign_rail_account_owner_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'grant % of rail account % is never deleted (revoke it instead)', OLD.id, OLD.rail_account
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.revoked_at IS NOT NULL OR NEW.revoked_by IS NOT NULL THEN
            RAISE EXCEPTION 'a grant of rail account % cannot be created revoked', NEW.rail_account
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF (NEW.id, NEW.rail_account, NEW.owner_id, NEW.granted_at, NEW.granted_by)
       IS DISTINCT FROM (OLD.id, OLD.rail_account, OLD.owner_id, OLD.granted_at, OLD.granted_by) THEN
        RAISE EXCEPTION 'grant % of rail account % is immutable but for its revocation', OLD.id, OLD.rail_account
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.revoked_at IS NOT NULL AND (NEW.revoked_at, NEW.revoked_by) IS DISTINCT FROM (OLD.revoked_at, OLD.revoked_by) THEN
        RAISE EXCEPTION 'revocation of grant % of rail account % is one-way', OLD.id, OLD.rail_account
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER rail_account_owners_guard BEFORE INSERT OR UPDATE OR DELETE ON rail_account_owners
    FOR EACH ROW EXECUTE FUNCTION countersign_rail_account_owner_guard();
CREATE TRIGGER rail_account_owners_no_truncate BEFORE TRUNCATE ON rail_account_owners
    FOR EACH STATEMENT EXECUTE FUNCTION countersign_append_only();

-- A mandate names its owner and its rail account; it is stored only while
-- that owner holds that account. The grant row is share-locked, so a
-- revocation running at the same time waits for this insert (and then
-- revokes the new mandate too), or this insert sees the revocation.
-- SQLSTATE CS403 is how the ledger recognises the refusal. (Row triggers
-- fire in name order: mandates_guard checks the row first.)
-- +goose StatementBegin
CREATE FUNCTION countersign_mandate_account_held() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM rail_account_owners
        WHERE rail_account = NEW.rail_account AND owner_id = NEW.owner_id AND revoked_at IS NULL
        FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'owner % does not hold rail account %', NEW.owner_id, NEW.rail_account
            USING ERRCODE = 'CS403';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER mandates_held_account BEFORE INSERT ON mandates
    FOR EACH ROW EXECUTE FUNCTION countersign_mandate_account_held();

-- +goose Down
DROP TRIGGER mandates_held_account ON mandates;
DROP FUNCTION countersign_mandate_account_held();
DROP TABLE rail_account_owners;
DROP FUNCTION countersign_rail_account_owner_guard();
