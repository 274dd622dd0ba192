-- +goose Up
-- Commits bound to the attempt (DESIGN.md §1, A1). A native Decide that
-- starts an attempt hands its caller a random commit token and keeps only
-- its SHA-256 here; Commit is accepted only with the token of the intent's
-- latest attempt. Attempts Envoy sends have no token: only ext_proc, on the
-- trusted listener, reports their answers.
ALTER TABLE attempts ADD COLUMN commit_token_hash bytea
    CHECK (commit_token_hash IS NULL OR length(commit_token_hash) = 32);

-- +goose StatementBegin
-- countersign_attempt_token_guard: an attempt's commit token is set when the
-- attempt is written and never changes.
CREATE FUNCTION countersign_attempt_token_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.commit_token_hash IS DISTINCT FROM OLD.commit_token_hash THEN
        RAISE EXCEPTION 'the commit token of attempt % of % % never changes', OLD.attempt_seq, OLD.rail_account, OLD.sik
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER attempts_token_guard BEFORE UPDATE OF commit_token_hash ON attempts
    FOR EACH ROW EXECUTE FUNCTION countersign_attempt_token_guard();

-- A rail "applied" that arrives after the intent was settled as not applied
-- (a definite rejection, or an exhaustive listing) contradicts the ledger:
-- the intent stops for a person instead of being sent again.
INSERT INTO intent_edges (from_state, event, to_state) VALUES
    ('FAILED_TERMINAL', 'QUARANTINE', 'QUARANTINED'),
    ('CONFIRMED_NOT_APPLIED', 'QUARANTINE', 'QUARANTINED');

-- +goose Down
DELETE FROM intent_edges WHERE event = 'QUARANTINE' AND from_state IN ('FAILED_TERMINAL', 'CONFIRMED_NOT_APPLIED');
DROP TRIGGER attempts_token_guard ON attempts;
DROP FUNCTION countersign_attempt_token_guard();
ALTER TABLE attempts DROP COLUMN commit_token_hash;
