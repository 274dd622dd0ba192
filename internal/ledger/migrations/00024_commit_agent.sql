-- +goose Up
-- The agent a native attempt's commit token was issued to. An intent is
-- one action of an owner, whichever of the owner's agents proposed it
-- first: a sibling agent may retry it once it is proven not applied, and
-- then it sends the new attempt and holds its token. Commit was bound to
-- the intent's first agent, so the sibling's report was refused and the
-- attempt could end only through its lease, in reconciliation. Now the
-- report is bound to the attempt's own agent.
ALTER TABLE attempts ADD COLUMN commit_agent text REFERENCES agents (id);
UPDATE attempts a SET commit_agent = i.agent_id FROM intents i
    WHERE a.rail_account = i.rail_account AND a.sik = i.sik AND a.commit_token_hash IS NOT NULL;
ALTER TABLE attempts ADD CONSTRAINT attempts_commit_agent_has_token CHECK (commit_agent IS NULL OR commit_token_hash IS NOT NULL);

-- +goose StatementBegin
-- countersign_attempt_token_guard: an attempt's commit token, and the agent
-- it was issued to, are set when the attempt is written and never change.
CREATE OR REPLACE FUNCTION countersign_attempt_token_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.commit_token_hash, NEW.commit_agent) IS DISTINCT FROM (OLD.commit_token_hash, OLD.commit_agent) THEN
        RAISE EXCEPTION 'the commit token of attempt % of % % never changes, nor whose it is', OLD.attempt_seq, OLD.rail_account, OLD.sik
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER attempts_token_guard ON attempts;
CREATE TRIGGER attempts_token_guard BEFORE UPDATE OF commit_token_hash, commit_agent ON attempts
    FOR EACH ROW EXECUTE FUNCTION countersign_attempt_token_guard();

-- +goose Down
DROP TRIGGER attempts_token_guard ON attempts;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_attempt_token_guard() RETURNS trigger
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
ALTER TABLE attempts DROP COLUMN commit_agent;
