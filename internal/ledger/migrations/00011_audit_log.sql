-- +goose Up
-- The audit log without chain heads (I6). Until now every transition's
-- record was hash-chained by the trigger onto one of 16 chains per rail
-- account under a FOR UPDATE lock on the chain head, which the deciding
-- transaction held until its commit: concurrent decisions on one account
-- queued behind each other. Now the trigger only appends the record
-- (unsealed, no lock shared between decisions), and a sequencer, off the
-- deciding transaction, seals records in order into an append-only Merkle
-- log per rail account (RFC 6962, internal/audit) with signed checkpoints.
--
-- Records chained before this migration are carried into the new log: they
-- get the lowest record ids, chain by chain in sequence order, so the
-- sequencer seals them first. Their chain columns stay as they were.

CREATE SEQUENCE audit_record_id_seq AS bigint;

ALTER TABLE audit_records
    ADD COLUMN id         bigint,
    ADD COLUMN leaf_index bigint CHECK (leaf_index >= 0);

-- Numbering the old rows is an UPDATE the append-only trigger refuses;
-- this migration is the one place it is allowed.
ALTER TABLE audit_records DISABLE TRIGGER audit_append_only;
UPDATE audit_records r SET id = o.n
    FROM (SELECT chain, seq, row_number() OVER (ORDER BY chain, seq) AS n FROM audit_records) o
    WHERE r.chain = o.chain AND r.seq = o.seq;
ALTER TABLE audit_records ENABLE TRIGGER audit_append_only;
SELECT setval('audit_record_id_seq', COALESCE((SELECT max(id) FROM audit_records), 0) + 1, false);

ALTER TABLE audit_records
    ALTER COLUMN id SET DEFAULT nextval('audit_record_id_seq'),
    ALTER COLUMN id SET NOT NULL,
    DROP CONSTRAINT audit_records_pkey,
    ADD PRIMARY KEY (id),
    ALTER COLUMN chain DROP NOT NULL,
    ALTER COLUMN seq DROP NOT NULL,
    ALTER COLUMN prev_hash DROP NOT NULL,
    ALTER COLUMN hash DROP NOT NULL,
    ADD CONSTRAINT audit_records_legacy_chain CHECK (
        (chain IS NULL) = (seq IS NULL) AND (chain IS NULL) = (prev_hash IS NULL) AND (chain IS NULL) = (hash IS NULL));
-- A leaf index is an account's once; an unsealed record has none and is not
-- in the index (a decision writes no entry here).
CREATE UNIQUE INDEX audit_records_leaf ON audit_records (rail_account, leaf_index) WHERE leaf_index IS NOT NULL;
ALTER SEQUENCE audit_record_id_seq OWNED BY audit_records.id;
CREATE UNIQUE INDEX audit_records_legacy ON audit_records (chain, seq) WHERE chain IS NOT NULL;
DROP INDEX audit_intent;
CREATE INDEX audit_intent ON audit_records (rail_account, sik, id);
-- What the sequencer looks for: one account's unsealed records in id order.
CREATE INDEX audit_unsealed ON audit_records (rail_account, id) WHERE leaf_index IS NULL;

-- +goose StatementBegin
-- countersign_audit_guard keeps audit_records append-only except for the
-- sequencer's seal: an UPDATE may set leaf_index from NULL to a value and
-- change nothing else. DELETE is always refused (TRUNCATE by
-- audit_no_truncate).
CREATE FUNCTION countersign_audit_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.leaf_index IS NULL AND NEW.leaf_index IS NOT NULL
       AND to_jsonb(NEW) - 'leaf_index' = to_jsonb(OLD) - 'leaf_index' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit_records is append-only: % refused (only sealing may set leaf_index, once)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd

DROP TRIGGER audit_append_only ON audit_records;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit_records
    FOR EACH ROW EXECUTE FUNCTION countersign_audit_guard();

-- +goose StatementBegin
-- countersign_intent_audit appends the audit record of every transition
-- (and of the birth of an intent) in the same transaction (I6). It runs
-- AFTER the row is written, so an INSERT that loses ON CONFLICT records
-- nothing. The record is unsealed: it takes no lock any other decision
-- needs (its id comes from a sequence), and the sequencer seals it later.
CREATE OR REPLACE FUNCTION countersign_intent_audit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_from   text := '';
    v_detail text := NEW.reason;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.state = OLD.state THEN
            RETURN NULL;
        END IF;
        v_from := OLD.state;
    ELSIF NEW.distinct_reason <> '' THEN
        v_detail := 'distinct: ' || NEW.distinct_reason;
    END IF;
    INSERT INTO audit_records (rail_account, sik, from_state, to_state, event, attempt_seq, detail, at_micros)
        VALUES (NEW.rail_account, NEW.sik, v_from, NEW.state, NEW.last_event, NEW.attempt_count, v_detail,
                (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- One row per rail account's log: the sequencer locks it while it seals,
-- so sealings of one account run one at a time (across every process
-- sharing the ledger) and never wait on a decision.
CREATE TABLE audit_logs (
    rail_account text        PRIMARY KEY,
    tree_size    bigint      NOT NULL DEFAULT 0 CHECK (tree_size >= 0),
    root_hash    bytea       CHECK (root_hash IS NULL OR length(root_hash) = 32),
    sealed_at    timestamptz,
    CHECK ((tree_size = 0) = (root_hash IS NULL))
);

-- The tree's stored hashes (golang.org/x/mod/sumdb/tlog's StoredHashIndex
-- numbering): every leaf hash and every complete subtree, written once.
CREATE TABLE audit_hashes (
    rail_account text   NOT NULL,
    idx          bigint NOT NULL CHECK (idx >= 0),
    hash         bytea  NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (rail_account, idx)
);

-- Every checkpoint the sequencer signed: a note (C2SP signed-note) whose
-- body is a C2SP tlog checkpoint (origin, tree size, base64 root hash).
-- The note is the evidence; tree_size only indexes it.
CREATE TABLE audit_checkpoints (
    rail_account text        NOT NULL,
    tree_size    bigint      NOT NULL CHECK (tree_size >= 1),
    note         text        NOT NULL,
    signed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rail_account, tree_size)
);

CREATE TRIGGER audit_hashes_append_only BEFORE UPDATE OR DELETE ON audit_hashes
    FOR EACH ROW EXECUTE FUNCTION countersign_append_only();
CREATE TRIGGER audit_hashes_no_truncate BEFORE TRUNCATE ON audit_hashes
    FOR EACH STATEMENT EXECUTE FUNCTION countersign_append_only();
CREATE TRIGGER audit_checkpoints_append_only BEFORE UPDATE OR DELETE ON audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION countersign_append_only();
CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION countersign_append_only();

-- +goose Down
-- Back to the chains: records written since the Up are chained now, in id
-- order, exactly as the old trigger would have chained them, so the old
-- `audit verify` accepts the whole table. The Merkle log is dropped.
DROP TABLE audit_checkpoints;
DROP TABLE audit_hashes;
DROP TABLE audit_logs;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_intent_audit() RETURNS trigger
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

DROP TRIGGER audit_append_only ON audit_records;
DROP FUNCTION countersign_audit_guard();

-- +goose StatementBegin
DO $$
DECLARE
    r      record;
    v_chain text;
    v_seq  bigint;
    v_prev bytea;
    v_hash bytea;
BEGIN
    FOR r IN SELECT * FROM audit_records WHERE chain IS NULL ORDER BY id LOOP
        v_chain := r.rail_account || '#' || lpad((get_byte(sha256(convert_to(r.sik, 'UTF8')), 0) % 16)::text, 2, '0');
        INSERT INTO audit_heads (chain, seq, hash)
            VALUES (v_chain, 0, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea)
            ON CONFLICT (chain) DO NOTHING;
        SELECT seq, hash INTO v_seq, v_prev FROM audit_heads WHERE chain = v_chain;
        v_seq := v_seq + 1;
        v_hash := sha256(v_prev || convert_to(
            countersign_audit_field(v_chain) ||
            countersign_audit_field(v_seq::text) ||
            countersign_audit_field(r.rail_account) ||
            countersign_audit_field(r.sik) ||
            countersign_audit_field(r.from_state) ||
            countersign_audit_field(r.to_state) ||
            countersign_audit_field(r.event) ||
            countersign_audit_field(r.attempt_seq::text) ||
            countersign_audit_field(r.detail) ||
            countersign_audit_field(r.at_micros::text), 'UTF8'));
        UPDATE audit_records SET chain = v_chain, seq = v_seq, prev_hash = v_prev, hash = v_hash WHERE id = r.id;
        UPDATE audit_heads SET seq = v_seq, hash = v_hash WHERE chain = v_chain;
    END LOOP;
END;
$$;
-- +goose StatementEnd

DROP INDEX audit_unsealed;
DROP INDEX audit_intent;
DROP INDEX audit_records_legacy;
DROP INDEX audit_records_leaf;
ALTER TABLE audit_records
    DROP CONSTRAINT audit_records_legacy_chain,
    DROP CONSTRAINT audit_records_pkey,
    ALTER COLUMN chain SET NOT NULL,
    ALTER COLUMN seq SET NOT NULL,
    ALTER COLUMN prev_hash SET NOT NULL,
    ALTER COLUMN hash SET NOT NULL,
    ADD PRIMARY KEY (chain, seq),
    DROP COLUMN leaf_index,
    DROP COLUMN id;
CREATE INDEX audit_intent ON audit_records (rail_account, sik, seq);
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit_records
    FOR EACH ROW EXECUTE FUNCTION countersign_append_only();
