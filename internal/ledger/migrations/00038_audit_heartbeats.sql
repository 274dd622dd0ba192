-- +goose Up
-- The sequencer's signed heartbeats (I6). `audit verify` judged how long
-- records had waited for sealing by their at_micros and the database's
-- clock, both of which whoever writes the ledger can set: with the
-- sequencer stopped, unsealed records could be erased or edited, their
-- at_micros refreshed, and verify passed, after which a sequencer sealed
-- the forged state (found by a review). Now, after each sealing pass that
-- sealed everything waiting, the sequencer signs, with the audit signing
-- key, a note naming its own clock and the highest record id it had seen
-- when the pass began; verify judges staleness by the newest heartbeat
-- whose signature verifies, against the verifier's clock. A heartbeat is
-- written when that id has moved on (at most once a second), else once
-- per 30 seconds, so an idle ledger grows ~2,900 rows a day, and a busy
-- one no faster than its checkpoints. The note is the evidence; the other
-- columns only index it (verify ignores a row they misdescribe).
CREATE TABLE audit_heartbeats (
    id            bigserial   PRIMARY KEY,
    max_record_id bigint      NOT NULL CHECK (max_record_id >= 0),
    signed_micros bigint      NOT NULL,
    note          text        NOT NULL,
    written_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_heartbeats_newest ON audit_heartbeats (signed_micros DESC, id DESC);

CREATE TRIGGER audit_heartbeats_append_only BEFORE UPDATE OR DELETE ON audit_heartbeats
    FOR EACH ROW EXECUTE FUNCTION countersign_append_only();
CREATE TRIGGER audit_heartbeats_no_truncate BEFORE TRUNCATE ON audit_heartbeats
    FOR EACH STATEMENT EXECUTE FUNCTION countersign_append_only();

-- +goose Down
DROP TABLE audit_heartbeats;
