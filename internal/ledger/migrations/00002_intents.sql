-- +goose Up
-- The exactly-once spine (DESIGN.md §1–§4): intents keyed by (rail_account,
-- sik), their attempts, reconciliation findings and the hash-chained audit
-- log. Every invariant is enforced here, not only in Go.

CREATE TABLE intent_states (
    state text PRIMARY KEY
);
INSERT INTO intent_states (state) VALUES
    ('PROPOSED'), ('HELD'), ('AUTHORIZED'), ('IN_FLIGHT'), ('APPLIED'), ('FAILED_TERMINAL'),
    ('UNKNOWN'), ('RECONCILING'), ('CONFIRMED_NOT_APPLIED'), ('BLOCKED'), ('QUARANTINED');

-- The legal edges of the state machine; internal/intent.Edges() is the same
-- table in Go, and a test fails if the two drift apart.
CREATE TABLE intent_edges (
    from_state text NOT NULL REFERENCES intent_states,
    event      text NOT NULL,
    to_state   text NOT NULL REFERENCES intent_states,
    PRIMARY KEY (from_state, event)
);
INSERT INTO intent_edges (from_state, event, to_state) VALUES
    ('PROPOSED', 'GATES_PASSED', 'AUTHORIZED'),
    ('PROPOSED', 'GATES_HELD', 'HELD'),
    ('PROPOSED', 'GATES_BLOCKED', 'BLOCKED'),
    ('HELD', 'HOLD_RELEASED', 'AUTHORIZED'),
    ('HELD', 'HOLD_REJECTED', 'BLOCKED'),
    ('HELD', 'GATES_BLOCKED', 'BLOCKED'),
    ('HELD', 'QUARANTINE', 'QUARANTINED'),
    ('AUTHORIZED', 'ATTEMPT_STARTED', 'IN_FLIGHT'),
    ('AUTHORIZED', 'GATES_BLOCKED', 'BLOCKED'),
    ('AUTHORIZED', 'QUARANTINE', 'QUARANTINED'),
    ('IN_FLIGHT', 'RAIL_APPLIED', 'APPLIED'),
    ('IN_FLIGHT', 'RAIL_REJECTED', 'FAILED_TERMINAL'),
    ('IN_FLIGHT', 'RAIL_AMBIGUOUS', 'UNKNOWN'),
    ('IN_FLIGHT', 'LEASE_EXPIRED', 'UNKNOWN'),
    ('FAILED_TERMINAL', 'REOPENED', 'AUTHORIZED'),
    ('UNKNOWN', 'RECONCILE_STARTED', 'RECONCILING'),
    ('UNKNOWN', 'QUARANTINE', 'QUARANTINED'),
    ('RECONCILING', 'FOUND_APPLIED', 'APPLIED'),
    ('RECONCILING', 'CONFIRMED_ABSENT', 'CONFIRMED_NOT_APPLIED'),
    ('RECONCILING', 'INCONCLUSIVE', 'UNKNOWN'),
    ('RECONCILING', 'QUARANTINE', 'QUARANTINED'),
    ('CONFIRMED_NOT_APPLIED', 'RETRY_AUTHORIZED', 'AUTHORIZED');

CREATE TABLE intents (
    rail_account        text        NOT NULL CHECK (length(rail_account) BETWEEN 1 AND 128),
    sik                 text        NOT NULL CHECK (sik ~ '^[A-Z2-7]{32}$'),
    state               text        NOT NULL REFERENCES intent_states,
    last_event          text        NOT NULL,
    rail                text        NOT NULL CHECK (rail IN ('stripe', 'razorpay', 'mcp')),
    action              text        NOT NULL CHECK (action IN ('refund', 'payout', 'transfer')),
    subject             text        NOT NULL CHECK (length(subject) BETWEEN 1 AND 255),
    amount_minor        bigint      NOT NULL CHECK (amount_minor >= 0),
    currency            text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    payee               text        NOT NULL DEFAULT '',
    distinct_reason     text        NOT NULL DEFAULT '',
    -- The exact canonical JSON hashed into the SIK (RFC 8785).
    canonical           text        NOT NULL,
    agent_id            text        REFERENCES agents (id),
    stamp_generation    integer     NOT NULL DEFAULT 0 CHECK (stamp_generation BETWEEN 0 AND 46655),
    attempt_count       integer     NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    reconcile_count     integer     NOT NULL DEFAULT 0 CHECK (reconcile_count >= 0),
    rail_entity_id      text,
    applied_attempt_seq integer,
    reason              text        NOT NULL DEFAULT '',
    -- Reconciler scheduling and lease: one worker at a time per intent.
    next_reconcile_at   timestamptz,
    reconcile_owner     text,
    reconcile_expires   timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rail_account, sik),
    CHECK ((state = 'APPLIED') = (rail_entity_id IS NOT NULL AND applied_attempt_seq IS NOT NULL)),
    CHECK (state NOT IN ('IN_FLIGHT', 'UNKNOWN', 'RECONCILING', 'FAILED_TERMINAL', 'CONFIRMED_NOT_APPLIED', 'APPLIED')
           OR attempt_count >= 1),
    CHECK (state NOT IN ('UNKNOWN', 'RECONCILING') OR next_reconcile_at IS NOT NULL)
);

CREATE INDEX intents_reconcile ON intents (next_reconcile_at) WHERE state IN ('UNKNOWN', 'RECONCILING');
CREATE INDEX intents_in_flight ON intents (rail_account, sik) WHERE state = 'IN_FLIGHT';
CREATE INDEX intents_subject ON intents (rail_account, subject);

-- An alias is the key of the request as the agent sent it (before the
-- referent is resolved). It lets a duplicate be answered from the ledger
-- without a read at the rail; it always points at the intent the same
-- request resolved to.
CREATE TABLE intent_aliases (
    rail_account text NOT NULL,
    alias        text NOT NULL CHECK (alias ~ '^[A-Z2-7]{32}$'),
    sik          text NOT NULL,
    PRIMARY KEY (rail_account, alias),
    FOREIGN KEY (rail_account, sik) REFERENCES intents (rail_account, sik)
);

CREATE TRIGGER intent_aliases_append_only BEFORE UPDATE OR DELETE ON intent_aliases
    FOR EACH ROW EXECUTE FUNCTION countersign_append_only();

-- An attempt is one stamped request that may reach the rail. It is
-- committed before the ALLOW answer leaves (I2).
CREATE TABLE attempts (
    rail_account      text        NOT NULL,
    sik               text        NOT NULL,
    attempt_seq       integer     NOT NULL CHECK (attempt_seq >= 1),
    stamp             text        NOT NULL CHECK (length(stamp) BETWEEN 4 AND 255),
    stamp_generation  integer     NOT NULL,
    outcome           text        NOT NULL DEFAULT 'pending'
                      CHECK (outcome IN ('pending', 'applied', 'rejected', 'ambiguous', 'in_progress', 'fingerprint_mismatch', 'lease_expired')),
    lease_owner       text        NOT NULL,
    lease_expires_at  timestamptz NOT NULL,
    request_method    text        NOT NULL DEFAULT '',
    request_path      text        NOT NULL DEFAULT '',
    request_headers   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    request_body      bytea,
    response_status   integer,
    response_headers  jsonb,
    response_body     bytea,
    transport_error   text,
    -- The request carried the body stamp (known once its answer is
    -- committed); without it an exhaustive listing proves nothing.
    body_stamped      boolean     NOT NULL DEFAULT false,
    -- The attempt was allowed through Envoy, whose ext_proc filter (failing
    -- closed) writes the body stamp before the request may leave: if it is
    -- never marked stamped, it never left.
    via_envoy         boolean     NOT NULL DEFAULT false,
    entity_id         text,
    fee_minor         bigint      CHECK (fee_minor IS NULL OR fee_minor >= 0),
    started_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    PRIMARY KEY (rail_account, sik, attempt_seq),
    FOREIGN KEY (rail_account, sik) REFERENCES intents (rail_account, sik),
    CHECK (outcome <> 'applied' OR entity_id IS NOT NULL)
);

-- What the reconciler saw at the rail for an intent.
CREATE TABLE reconciliation_findings (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rail_account         text        NOT NULL,
    sik                  text        NOT NULL,
    attempt_seq          integer     NOT NULL,
    outcome              text        NOT NULL CHECK (outcome IN ('found_applied', 'confirmed_absent', 'inconclusive')),
    pages                integer     NOT NULL CHECK (pages >= 0),
    pagination_exhausted boolean     NOT NULL,
    entity_id            text,
    detail               text        NOT NULL DEFAULT '',
    found_at             timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (rail_account, sik) REFERENCES intents (rail_account, sik),
    -- Absence on page one is not absence.
    CHECK (outcome <> 'confirmed_absent' OR (pagination_exhausted AND pages >= 1)),
    CHECK ((outcome = 'found_applied') = (entity_id IS NOT NULL))
);

CREATE INDEX findings_intent ON reconciliation_findings (rail_account, sik, attempt_seq);

-- The audit log: hash chains, 16 per rail account, each intent's records
-- always on the same chain (chosen by its SIK). Decisions on different rail
-- accounts never wait on one global lock, and concurrent intents on one
-- account rarely wait on each other.
CREATE TABLE audit_heads (
    chain        text    PRIMARY KEY,
    seq          bigint  NOT NULL CHECK (seq >= 0),
    hash         bytea   NOT NULL CHECK (length(hash) = 32)
);

CREATE TABLE audit_records (
    chain        text        NOT NULL,
    rail_account text        NOT NULL,
    seq          bigint      NOT NULL CHECK (seq >= 1),
    sik          text        NOT NULL,
    from_state   text        NOT NULL,
    to_state     text        NOT NULL,
    event        text        NOT NULL,
    attempt_seq  integer     NOT NULL,
    detail       text        NOT NULL,
    at_micros    bigint      NOT NULL,
    prev_hash    bytea       NOT NULL CHECK (length(prev_hash) = 32),
    hash         bytea       NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (chain, seq)
);

CREATE INDEX audit_intent ON audit_records (rail_account, sik, seq);

-- +goose StatementBegin
-- countersign_audit_field encodes one field as "<octets>:<text>", so the
-- concatenation is unambiguous; internal/ledger/audit.go does the same.
CREATE FUNCTION countersign_audit_field(v text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT octet_length(v)::text || ':' || v $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- countersign_intent_guard is the database's copy of the state machine:
-- an illegal edge, a change to an absorbing intent, CONFIRMED_NOT_APPLIED
-- without an exhaustive finding, or a deleted intent are all refused.
-- The audit record is appended by countersign_intent_audit.
CREATE FUNCTION countersign_intent_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'intents are never deleted (% %)', OLD.rail_account, OLD.sik
            USING ERRCODE = 'insufficient_privilege';
    END IF;

    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'PROPOSED' OR NEW.last_event <> 'PROPOSED' THEN
            RAISE EXCEPTION 'an intent is born PROPOSED, not %', NEW.state USING ERRCODE = 'check_violation';
        END IF;
    ELSE
        IF OLD.state IN ('APPLIED', 'BLOCKED') THEN
            RAISE EXCEPTION 'intent % % is % and absorbing: no change allowed', OLD.rail_account, OLD.sik, OLD.state
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.rail_account IS DISTINCT FROM OLD.rail_account OR NEW.sik IS DISTINCT FROM OLD.sik
           OR NEW.canonical IS DISTINCT FROM OLD.canonical OR NEW.amount_minor IS DISTINCT FROM OLD.amount_minor
           OR NEW.currency IS DISTINCT FROM OLD.currency OR NEW.subject IS DISTINCT FROM OLD.subject
           OR NEW.action IS DISTINCT FROM OLD.action OR NEW.rail IS DISTINCT FROM OLD.rail
           OR NEW.created_at IS DISTINCT FROM OLD.created_at THEN
            RAISE EXCEPTION 'the action of intent % % is immutable', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.attempt_count < OLD.attempt_count OR NEW.stamp_generation < OLD.stamp_generation
           OR NEW.reconcile_count < OLD.reconcile_count THEN
            RAISE EXCEPTION 'intent % % counters only increase', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.stamp_generation > OLD.stamp_generation AND NOT (OLD.state = 'FAILED_TERMINAL' AND NEW.last_event = 'REOPENED') THEN
            RAISE EXCEPTION 'the stamp generation of % % changes only when a FAILED_TERMINAL intent is reopened', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.state = OLD.state THEN
            -- Not a transition (e.g. a reconciler lease or schedule): nothing to audit.
            IF NEW.attempt_count <> OLD.attempt_count OR NEW.stamp_generation <> OLD.stamp_generation THEN
                RAISE EXCEPTION 'intent % % changed its attempt or stamp without a transition', OLD.rail_account, OLD.sik
                    USING ERRCODE = 'check_violation';
            END IF;
            NEW.last_event := OLD.last_event;
            NEW.updated_at := now();
            RETURN NEW;
        END IF;
        PERFORM 1 FROM intent_edges
            WHERE from_state = OLD.state AND event = NEW.last_event AND to_state = NEW.state;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'illegal transition of % %: % --%--> %', OLD.rail_account, OLD.sik, OLD.state, NEW.last_event, NEW.state
                USING ERRCODE = 'check_violation';
        END IF;
        -- I5: an attempt starts only on AUTHORIZED -> IN_FLIGHT, and it is the next one.
        IF (NEW.last_event = 'ATTEMPT_STARTED') <> (NEW.attempt_count = OLD.attempt_count + 1) THEN
            RAISE EXCEPTION 'intent % %: attempt_count must grow by one exactly when an attempt starts', OLD.rail_account, OLD.sik
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.state = 'CONFIRMED_NOT_APPLIED' THEN
            PERFORM 1 FROM reconciliation_findings f
                WHERE f.rail_account = NEW.rail_account AND f.sik = NEW.sik
                  AND f.attempt_seq = NEW.attempt_count
                  AND f.outcome = 'confirmed_absent' AND f.pagination_exhausted;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'intent % %: CONFIRMED_NOT_APPLIED needs an exhaustive confirmed_absent finding for attempt %',
                    NEW.rail_account, NEW.sik, NEW.attempt_count USING ERRCODE = 'check_violation';
            END IF;
        END IF;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- countersign_intent_audit appends the audit record of every transition
-- (and of the birth of an intent) in the same transaction (I6). It runs
-- AFTER the row is written, so an INSERT that loses ON CONFLICT records
-- nothing.
CREATE FUNCTION countersign_intent_audit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_from   text := '';
    v_prev   bytea;
    v_seq    bigint;
    v_at     bigint;
    v_hash   bytea;
    v_detail text := NEW.reason;
    v_chain  text := NEW.rail_account || '#' || lpad((get_byte(sha256(convert_to(NEW.sik, 'UTF8')), 0) % 16)::text, 2, '0');
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.state = OLD.state THEN
            RETURN NULL;
        END IF;
        v_from := OLD.state;
    ELSIF NEW.distinct_reason <> '' THEN
        v_detail := 'distinct: ' || NEW.distinct_reason;
    END IF;

    -- Append to the intent's chain. The head row lock orders the chain;
    -- it is one of 16 per rail account, never global.
    INSERT INTO audit_heads (chain, seq, hash)
        VALUES (v_chain, 0, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea)
        ON CONFLICT (chain) DO NOTHING;
    SELECT seq, hash INTO v_seq, v_prev FROM audit_heads WHERE chain = v_chain FOR UPDATE;
    v_seq := v_seq + 1;
    v_at := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    v_hash := sha256(v_prev || convert_to(
        countersign_audit_field(v_chain) ||
        countersign_audit_field(v_seq::text) ||
        countersign_audit_field(NEW.rail_account) ||
        countersign_audit_field(NEW.sik) ||
        countersign_audit_field(v_from) ||
        countersign_audit_field(NEW.state) ||
        countersign_audit_field(NEW.last_event) ||
        countersign_audit_field(NEW.attempt_count::text) ||
        countersign_audit_field(v_detail) ||
        countersign_audit_field(v_at::text), 'UTF8'));
    INSERT INTO audit_records (chain, rail_account, seq, sik, from_state, to_state, event, attempt_seq, detail, at_micros, prev_hash, hash)
        VALUES (v_chain, NEW.rail_account, v_seq, NEW.sik, v_from, NEW.state, NEW.last_event, NEW.attempt_count, v_detail, v_at, v_prev, v_hash);
    UPDATE audit_heads SET seq = v_seq, hash = v_hash WHERE chain = v_chain;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER intents_guard BEFORE INSERT OR UPDATE OR DELETE ON intents
    FOR EACH ROW EXECUTE FUNCTION countersign_intent_guard();
CREATE TRIGGER intents_audit AFTER INSERT OR UPDATE ON intents
    FOR EACH ROW EXECUTE FUNCTION countersign_intent_audit();

-- +goose StatementBegin
-- countersign_attempt_guard: an attempt row is inserted only for an intent
-- that is IN_FLIGHT on exactly that attempt (I2, I5); its identity and
-- request never change, and a settled outcome is final.
CREATE FUNCTION countersign_attempt_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'attempts are never deleted' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'INSERT' THEN
        PERFORM 1 FROM intents i
            WHERE i.rail_account = NEW.rail_account AND i.sik = NEW.sik
              AND i.state = 'IN_FLIGHT' AND i.attempt_count = NEW.attempt_seq
              AND i.stamp_generation = NEW.stamp_generation;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'attempt % of % % does not match an IN_FLIGHT intent on that attempt', NEW.attempt_seq, NEW.rail_account, NEW.sik
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.rail_account IS DISTINCT FROM OLD.rail_account OR NEW.sik IS DISTINCT FROM OLD.sik
       OR NEW.attempt_seq IS DISTINCT FROM OLD.attempt_seq OR NEW.stamp IS DISTINCT FROM OLD.stamp
       OR NEW.request_body IS DISTINCT FROM OLD.request_body AND OLD.request_body IS NOT NULL THEN
        RAISE EXCEPTION 'attempt % of % % is immutable', OLD.attempt_seq, OLD.rail_account, OLD.sik
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.outcome IN ('applied', 'rejected', 'fingerprint_mismatch') AND NEW.outcome IS DISTINCT FROM OLD.outcome THEN
        RAISE EXCEPTION 'attempt % of % % is settled as %', OLD.attempt_seq, OLD.rail_account, OLD.sik, OLD.outcome
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER attempts_guard BEFORE INSERT OR UPDATE OR DELETE ON attempts
    FOR EACH ROW EXECUTE FUNCTION countersign_attempt_guard();

CREATE TRIGGER findings_append_only BEFORE UPDATE OR DELETE ON reconciliation_findings
    FOR EACH ROW EXECUTE FUNCTION countersign_append_only();
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit_records
    FOR EACH ROW EXECUTE FUNCTION countersign_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit_records
    FOR EACH STATEMENT EXECUTE FUNCTION countersign_append_only();

-- A decision names the intent it touched, when there was one.
ALTER TABLE decisions
    ADD COLUMN rail_account text,
    ADD COLUMN sik          text,
    ADD COLUMN attempt_seq  integer,
    ADD CONSTRAINT decisions_intent CHECK ((rail_account IS NULL) = (sik IS NULL));
CREATE INDEX decisions_intent_idx ON decisions (rail_account, sik) WHERE sik IS NOT NULL;

-- +goose Down
ALTER TABLE decisions DROP COLUMN rail_account, DROP COLUMN sik, DROP COLUMN attempt_seq;
DROP TABLE audit_records;
DROP TABLE audit_heads;
DROP TABLE reconciliation_findings;
DROP TABLE attempts;
DROP TABLE intent_aliases;
DROP TABLE intents;
DROP TABLE intent_edges;
DROP TABLE intent_states;
DROP FUNCTION countersign_attempt_guard();
DROP FUNCTION countersign_intent_audit();
DROP FUNCTION countersign_intent_guard();
DROP FUNCTION countersign_audit_field(text);
