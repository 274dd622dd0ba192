-- +goose Up
-- The fee an applied attempt reports was added to its mandate's usage row,
-- the row every decision under the mandate locks to take its turn. So an
-- APPLIED commit that carried a fee (Stripe's and Razorpay's answers do)
-- waited for the decision holding that lock, and a commit that had already
-- posted its hold (taking its window rows) could deadlock with a decision
-- that held the lock and wanted the same rows. Fees are now counted apart,
-- like the spent budget (00025): over 16 rows per mandate chosen by the
-- SIK, which only commits write and a reader sums. The fee budget is
-- checked on what committed before the decision's statement, as it was on
-- the row before: a fee is reported after its action, so one committing
-- meanwhile counts from the next decision on.
CREATE TABLE mandate_fee_spent (
    mandate_hash text     NOT NULL,
    shard        smallint NOT NULL CHECK (shard BETWEEN 0 AND 15),
    fee_minor    bigint   NOT NULL CHECK (fee_minor >= 0),
    PRIMARY KEY (mandate_hash, shard)
);
LOCK TABLE mandate_usage IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO mandate_fee_spent (mandate_hash, shard, fee_minor)
    SELECT mandate_hash, 0, fee_spent_minor FROM mandate_usage WHERE fee_spent_minor > 0;
ALTER TABLE mandate_usage DROP COLUMN fee_spent_minor;

-- +goose StatementBegin
-- countersign_count_fees adds the fee of an attempt to its mandate's fee
-- rows when the attempt is settled applied.
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

-- +goose Down
LOCK TABLE mandate_usage IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE mandate_usage ADD COLUMN fee_spent_minor bigint NOT NULL DEFAULT 0 CHECK (fee_spent_minor >= 0);
INSERT INTO mandate_usage (mandate_hash) SELECT DISTINCT mandate_hash FROM mandate_fee_spent ON CONFLICT DO NOTHING;
UPDATE mandate_usage u SET fee_spent_minor = f.fee_minor
    FROM (SELECT mandate_hash, sum(fee_minor) AS fee_minor FROM mandate_fee_spent GROUP BY 1) f
    WHERE u.mandate_hash = f.mandate_hash;
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
            INSERT INTO mandate_usage (mandate_hash, fee_spent_minor) VALUES (v_hash, NEW.fee_minor)
                ON CONFLICT (mandate_hash) DO UPDATE SET fee_spent_minor = mandate_usage.fee_spent_minor + EXCLUDED.fee_spent_minor;
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP TABLE mandate_fee_spent;
