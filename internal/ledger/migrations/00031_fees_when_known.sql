-- +goose Up
-- A fee counted in the mandate's fee rows (the fee budget) only when its
-- attempt's outcome turned 'applied' with the fee already on the row. An
-- attempt settled applied by the reconciler (its listing carries no fee),
-- whose answer with the fee reached the ledger afterwards, and an answer
-- "applied" that came after the intent was settled not applied (kept on
-- the attempt, the hold placed again, the outcome left as it was), never
-- counted their fee: an agent that reset its connection once its request
-- had left, so that the answer came late or through reconciliation, spent
-- past the fee budget. A fee now counts once, when the attempt first has
-- both a fee and the rail's word that it applied (its outcome, or the
-- entity an applied answer names), in whichever order they came.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_count_fees() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_hash text;
BEGIN
    IF COALESCE(NEW.fee_minor, 0) > 0 AND (NEW.outcome = 'applied' OR NEW.entity_id IS NOT NULL)
       AND NOT (COALESCE(OLD.fee_minor, 0) > 0 AND (OLD.outcome = 'applied' OR OLD.entity_id IS NOT NULL)) THEN
        SELECT mandate_hash INTO v_hash FROM budget_holds WHERE rail_account = NEW.rail_account AND sik = NEW.sik
            ORDER BY hold_seq DESC LIMIT 1;
        IF v_hash IS NOT NULL THEN
            INSERT INTO mandate_fee_spent AS f (mandate_hash, shard, fee_minor) VALUES (v_hash, hashtext(NEW.sik) & 15, NEW.fee_minor)
                ON CONFLICT (mandate_hash, shard) DO UPDATE SET fee_minor = f.fee_minor + EXCLUDED.fee_minor;
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER attempts_count_fees ON attempts;
CREATE TRIGGER attempts_count_fees AFTER UPDATE OF outcome, fee_minor, entity_id ON attempts
    FOR EACH ROW EXECUTE FUNCTION countersign_count_fees();

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION countersign_count_fees() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_hash text;
BEGIN
    IF NEW.outcome = 'applied' AND OLD.outcome <> 'applied' AND COALESCE(NEW.fee_minor, 0) > 0 THEN
        SELECT mandate_hash INTO v_hash FROM budget_holds WHERE rail_account = NEW.rail_account AND sik = NEW.sik
            ORDER BY hold_seq DESC LIMIT 1;
        IF v_hash IS NOT NULL THEN
            INSERT INTO mandate_fee_spent AS f (mandate_hash, shard, fee_minor) VALUES (v_hash, hashtext(NEW.sik) & 15, NEW.fee_minor)
                ON CONFLICT (mandate_hash, shard) DO UPDATE SET fee_minor = f.fee_minor + EXCLUDED.fee_minor;
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER attempts_count_fees ON attempts;
CREATE TRIGGER attempts_count_fees AFTER UPDATE OF outcome ON attempts
    FOR EACH ROW EXECUTE FUNCTION countersign_count_fees();
