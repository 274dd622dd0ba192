-- +goose Up
-- Events (DESIGN.md §7): a transactional outbox. A trigger on intents writes
-- the event of every interesting transition, and one delivery per matching
-- webhook of the agent's owner, in the same transaction as the transition:
-- no code path can change an intent's state without its event, and a
-- rolled-back transition leaves no event behind. internal/outbox delivers
-- them, signed, at least once, under leases, with backoff and a dead letter.

-- A webhook is an owner's endpoint. The signing secret is stored as given:
-- the dispatcher needs it in clear to compute the HMAC, and there is no KMS
-- to wrap it with (anyone who can read this table can forge deliveries, so
-- guard the database role as you guard the rail keys). CreateWebhook shows it
-- once; no owner-facing query ever reads it back.
CREATE TABLE webhooks (
    id          text        PRIMARY KEY CHECK (id ~ '^whk_[a-z0-9]{8,64}$'),
    owner_id    text        NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 128),
    url         text        NOT NULL CHECK (url ~ '^https?://[^[:space:]]+$' AND length(url) <= 2048),
    secret      text        NOT NULL CHECK (length(secret) BETWEEN 16 AND 256),
    -- Event types to deliver; empty means every type.
    event_types text[]      NOT NULL DEFAULT '{}'
                CHECK (cardinality(event_types) <= 64 AND array_position(event_types, NULL) IS NULL),
    description text        NOT NULL DEFAULT '' CHECK (length(description) <= 1000),
    created_at  timestamptz NOT NULL DEFAULT now(),
    deleted_at  timestamptz,
    CHECK (deleted_at IS NULL OR deleted_at >= created_at)
);

CREATE INDEX webhooks_owner_live ON webhooks (owner_id, created_at, id) WHERE deleted_at IS NULL;

-- An event, once written, is a fact: it is never changed.
CREATE TABLE outbox (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id     text        NOT NULL,
    event_type   text        NOT NULL CHECK (event_type ~ '^[a-z_]+(\.[a-z_]+)+$'),
    -- The intent the event is about, when it is about one.
    rail_account text,
    sik          text,
    payload      jsonb       NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    created_at   timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (rail_account, sik) REFERENCES intents (rail_account, sik),
    CHECK ((rail_account IS NULL) = (sik IS NULL))
);

CREATE INDEX outbox_intent ON outbox (rail_account, sik) WHERE sik IS NOT NULL;
CREATE INDEX outbox_owner ON outbox (owner_id, id);

CREATE TRIGGER outbox_immutable BEFORE UPDATE ON outbox
    FOR EACH ROW EXECUTE FUNCTION countersign_append_only();

-- One event to one webhook. pending → delivered, or pending → dead after the
-- dispatcher's last attempt (a dead letter; replay puts it back to pending),
-- or → dropped when the webhook is deleted. delivered and dropped are final.
-- A dispatcher holds a pending delivery under a lease; claims counts every
-- lease ever granted and is the fencing token a mark must present, so a
-- dispatcher whose lease expired (or was taken over) can mark nothing.
CREATE TABLE outbox_deliveries (
    outbox_id        bigint      NOT NULL REFERENCES outbox (id),
    webhook_id       text        NOT NULL REFERENCES webhooks (id),
    state            text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead', 'dropped')),
    -- Attempts since the delivery was created or last replayed.
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    claims           bigint      NOT NULL DEFAULT 0 CHECK (claims >= 0),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_expires_at timestamptz,
    last_status      integer     NOT NULL DEFAULT 0 CHECK (last_status BETWEEN 0 AND 999),
    last_error       text        NOT NULL DEFAULT '' CHECK (length(last_error) <= 2000),
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    dead_at          timestamptz,
    replayed_at      timestamptz,
    PRIMARY KEY (outbox_id, webhook_id),
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
    CHECK (state = 'pending' OR lease_owner IS NULL),
    CHECK ((state = 'delivered') = (delivered_at IS NOT NULL)),
    CHECK (state <> 'dead' OR dead_at IS NOT NULL)
);

CREATE INDEX outbox_deliveries_due ON outbox_deliveries (next_attempt_at, outbox_id) WHERE state = 'pending';
CREATE INDEX outbox_deliveries_webhook ON outbox_deliveries (webhook_id, outbox_id) WHERE state IN ('pending', 'dead');
CREATE INDEX outbox_deliveries_dead_letters ON outbox_deliveries (outbox_id, webhook_id) WHERE dead_at IS NOT NULL;

-- +goose StatementBegin
-- countersign_webhook_guard: a webhook never changes but for its one-way
-- deletion, and its row is never removed (deliveries name it).
CREATE FUNCTION countersign_webhook_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'webhook % is never removed (delete it by setting deleted_at)', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (NEW.id, NEW.owner_id, NEW.url, NEW.secret, NEW.event_types, NEW.description, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.owner_id, OLD.url, OLD.secret, OLD.event_types, OLD.description, OLD.created_at) THEN
        RAISE EXCEPTION 'webhook % is immutable: delete it and create another', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.deleted_at IS NOT NULL AND NEW.deleted_at IS DISTINCT FROM OLD.deleted_at THEN
        RAISE EXCEPTION 'deletion of webhook % is one-way', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER webhooks_guard BEFORE UPDATE OR DELETE ON webhooks
    FOR EACH ROW EXECUTE FUNCTION countersign_webhook_guard();

-- +goose StatementBegin
-- countersign_delivery_guard: a delivery's identity never changes, delivered
-- and dropped are final (at least once, not again after success), and only a
-- dead letter goes back to pending (a replay).
CREATE FUNCTION countersign_delivery_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'webhook deliveries are never removed' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.outbox_id IS DISTINCT FROM OLD.outbox_id OR NEW.webhook_id IS DISTINCT FROM OLD.webhook_id
       OR NEW.created_at IS DISTINCT FROM OLD.created_at OR NEW.claims < OLD.claims THEN
        RAISE EXCEPTION 'delivery %-% is immutable but for its progress', OLD.outbox_id, OLD.webhook_id
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.state IN ('delivered', 'dropped') AND NEW.state IS DISTINCT FROM OLD.state THEN
        RAISE EXCEPTION 'delivery %-% is % and final', OLD.outbox_id, OLD.webhook_id, OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.state = 'dead' AND NEW.state = 'pending' AND NEW.replayed_at IS NOT DISTINCT FROM OLD.replayed_at THEN
        RAISE EXCEPTION 'dead delivery %-% goes back to pending only by a replay', OLD.outbox_id, OLD.webhook_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_deliveries_guard BEFORE UPDATE OR DELETE ON outbox_deliveries
    FOR EACH ROW EXECUTE FUNCTION countersign_delivery_guard();

-- +goose StatementBegin
-- countersign_intent_outbox writes the event of a transition into an
-- interesting state, and its deliveries, in the transition's transaction
-- (like countersign_intent_audit). Intents are born PROPOSED, which has no
-- event; an intent without an agent has no owner to tell. The fan-out is to
-- the webhooks live when the event happens: a webhook created later does not
-- receive older events.
CREATE FUNCTION countersign_intent_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_type  text;
    v_owner text;
    v_id    bigint;
    v_at    timestamptz := clock_timestamp();
BEGIN
    IF NEW.state IS NOT DISTINCT FROM OLD.state OR NEW.agent_id IS NULL THEN
        RETURN NULL;
    END IF;
    v_type := CASE NEW.state
        WHEN 'HELD' THEN 'intent.held'
        WHEN 'APPLIED' THEN 'intent.applied'
        WHEN 'QUARANTINED' THEN 'intent.quarantined'
        WHEN 'BLOCKED' THEN 'intent.blocked'
        WHEN 'CONFIRMED_NOT_APPLIED' THEN 'intent.confirmed_not_applied'
        WHEN 'FAILED_TERMINAL' THEN 'intent.failed'
    END;
    IF v_type IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT owner_id INTO STRICT v_owner FROM agents WHERE id = NEW.agent_id;
    -- The id is taken first so that the payload can carry it.
    v_id := nextval(pg_get_serial_sequence('outbox', 'id'));
    INSERT INTO outbox (id, owner_id, event_type, rail_account, sik, payload, created_at)
    OVERRIDING SYSTEM VALUE
    VALUES (v_id, v_owner, v_type, NEW.rail_account, NEW.sik, jsonb_build_object(
        'id', v_id::text,
        'event', v_type,
        'occurred_at', to_char(v_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'rail_account', NEW.rail_account,
        'sik', NEW.sik,
        'rail', NEW.rail,
        'action', NEW.action,
        'state', NEW.state,
        'from_state', OLD.state,
        'transition', NEW.last_event,
        'subject', NEW.subject,
        'amount_minor', NEW.amount_minor,
        'currency', NEW.currency,
        'payee', NEW.payee,
        'agent_id', NEW.agent_id,
        'attempt', NEW.attempt_count,
        'rail_entity_id', NEW.rail_entity_id,
        'reason', NEW.reason), v_at);
    INSERT INTO outbox_deliveries (outbox_id, webhook_id, next_attempt_at)
        SELECT v_id, w.id, v_at FROM webhooks w
        WHERE w.owner_id = v_owner AND w.deleted_at IS NULL
          AND (cardinality(w.event_types) = 0 OR v_type = ANY (w.event_types));
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER intents_outbox AFTER UPDATE OF state ON intents
    FOR EACH ROW EXECUTE FUNCTION countersign_intent_outbox();

-- +goose Down
DROP TRIGGER intents_outbox ON intents;
DROP FUNCTION countersign_intent_outbox();
DROP TABLE outbox_deliveries;
DROP FUNCTION countersign_delivery_guard();
DROP TABLE outbox;
DROP TABLE webhooks;
DROP FUNCTION countersign_webhook_guard();
