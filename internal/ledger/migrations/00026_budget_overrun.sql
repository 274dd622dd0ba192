-- +goose Up
-- A hold voided because the ledger settled its intent as not applied is
-- placed again when the rail later answers "applied" (reported.go,
-- holdAgain): the money left after all. The budget may have been taken
-- since, and the rail's answer must be recorded whatever it costs, so that
-- hold was placed outside the budget. Then the budget did not count money
-- that had left: once other holds were voided, new ones could fill the
-- room, and more than the budget could leave in all (B1).
--
-- Now the hold placed again is reserved like any other (beyond_budget
-- marks it), and may take the reservation past the budget. overrun_minor
-- is how far past: the CHECK keeps it equal to GREATEST(0, reserved -
-- budget), so no other hold can be placed while it is above zero (an
-- ordinary placement leaves it as it was, and the CHECK refuses the row),
-- and a voided hold gives back only what is left after the overrun.
ALTER TABLE budget_holds ADD COLUMN beyond_budget boolean NOT NULL DEFAULT false;
ALTER TABLE mandate_budgets ADD COLUMN overrun_minor bigint NOT NULL DEFAULT 0,
    DROP CONSTRAINT budget_never_exceeded;

-- The holds the old rule placed outside the budget come in now: a hold
-- still held, not budgeted, of an intent whose earlier hold under the same
-- mandate and currency was budgeted and voided, is one placed again that
-- the budget could not take (a retry under a newer mandate without a
-- budget is not: its mandate differs, or has no budget row). Each is
-- reserved, past the budget if need be. The hold guard forbids changing a
-- hold's budgeted flag, so it is off for this one statement; no hold is
-- written meanwhile.
LOCK TABLE budget_holds IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE budget_holds DISABLE TRIGGER budget_holds_guard;
WITH outside AS (
    UPDATE budget_holds h SET budgeted = true, beyond_budget = true
    WHERE h.state = 'held' AND NOT h.budgeted
      AND EXISTS (SELECT 1 FROM budget_holds v WHERE v.rail_account = h.rail_account AND v.sik = h.sik
                    AND v.hold_seq < h.hold_seq AND v.state = 'voided' AND v.budgeted
                    AND v.mandate_hash = h.mandate_hash AND v.currency = h.currency)
      AND EXISTS (SELECT 1 FROM mandate_budgets b WHERE b.mandate_hash = h.mandate_hash AND b.currency = h.currency)
    RETURNING h.mandate_hash, h.currency, h.amount_minor)
UPDATE mandate_budgets b SET reserved_minor = b.reserved_minor + o.amount_minor
FROM (SELECT mandate_hash, currency, sum(amount_minor) AS amount_minor FROM outside GROUP BY 1, 2) o
WHERE b.mandate_hash = o.mandate_hash AND b.currency = o.currency;
ALTER TABLE budget_holds ENABLE TRIGGER budget_holds_guard;
UPDATE mandate_budgets SET overrun_minor = GREATEST(0, reserved_minor - budget_minor);
ALTER TABLE mandate_budgets
    ADD CONSTRAINT budget_never_exceeded CHECK (overrun_minor = GREATEST(0, reserved_minor - budget_minor));

-- +goose StatementBegin
-- countersign_hold_guard: a hold is born held and settles exactly once
-- (B2). Placing a budgeted hold reserves its amount in the mandate's budget
-- row; voiding gives it back; posting counts it spent, apart, and leaves
-- the reservation as it is. overrun_minor follows the reservation: only a
-- hold placed again (beyond_budget) may take it past the budget, and every
-- change sets it to what the reservation is past the budget (the CHECK).
CREATE OR REPLACE FUNCTION countersign_hold_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'budget holds are never deleted' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'held' OR NEW.settled_at IS NOT NULL THEN
            RAISE EXCEPTION 'a budget hold is born held' USING ERRCODE = 'check_violation';
        END IF;
        -- Nested, so that an ordinary hold runs no query for it.
        IF NEW.beyond_budget THEN
            IF NOT EXISTS (SELECT 1 FROM budget_holds h WHERE h.rail_account = NEW.rail_account AND h.sik = NEW.sik
                             AND h.hold_seq < NEW.hold_seq AND h.state = 'voided') THEN
                RAISE EXCEPTION 'budget hold %/%#%: only a voided hold placed again may go beyond the budget', NEW.rail_account, NEW.sik, NEW.hold_seq
                    USING ERRCODE = 'check_violation';
            END IF;
        END IF;
        IF NEW.budgeted THEN
            UPDATE mandate_budgets SET reserved_minor = reserved_minor + NEW.amount_minor,
                overrun_minor = CASE WHEN NEW.beyond_budget THEN GREATEST(0, reserved_minor + NEW.amount_minor - budget_minor) ELSE overrun_minor END
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'no budget row for mandate % in %', NEW.mandate_hash, NEW.currency
                    USING ERRCODE = 'check_violation';
            END IF;
        END IF;
        RETURN NEW;
    END IF;
    IF (NEW.rail_account, NEW.sik, NEW.hold_seq, NEW.mandate_hash, NEW.currency, NEW.amount_minor, NEW.budgeted, NEW.beyond_budget)
       IS DISTINCT FROM (OLD.rail_account, OLD.sik, OLD.hold_seq, OLD.mandate_hash, OLD.currency, OLD.amount_minor, OLD.budgeted, OLD.beyond_budget) THEN
        RAISE EXCEPTION 'a budget hold is immutable but for its settlement' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = OLD.state THEN
        IF NEW.settled_at IS DISTINCT FROM OLD.settled_at THEN
            RAISE EXCEPTION 'budget hold %/%#%: settled_at is immutable but for its settlement', OLD.rail_account, OLD.sik, OLD.hold_seq
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.state <> 'held' THEN
        RAISE EXCEPTION 'budget hold %/%#% is already %: it settles exactly once', OLD.rail_account, OLD.sik, OLD.hold_seq, OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    NEW.settled_at := GREATEST(NEW.settled_at, clock_timestamp());
    IF NEW.budgeted THEN
        IF NEW.state = 'posted' THEN
            INSERT INTO mandate_budget_spent AS s (mandate_hash, currency, shard, spent_minor)
                VALUES (NEW.mandate_hash, NEW.currency, hashtext(NEW.sik) & 15, NEW.amount_minor)
                ON CONFLICT (mandate_hash, currency, shard) DO UPDATE SET spent_minor = s.spent_minor + EXCLUDED.spent_minor;
        ELSE
            UPDATE mandate_budgets SET reserved_minor = reserved_minor - NEW.amount_minor,
                overrun_minor = GREATEST(0, reserved_minor - NEW.amount_minor - budget_minor)
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- An overrun cannot be expressed in the old row: refuse rather than lose it.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM mandate_budgets WHERE overrun_minor > 0) THEN
        RAISE EXCEPTION 'a mandate budget is overrun by a hold placed again; migration 00026 cannot be undone';
    END IF;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
-- countersign_hold_guard: a hold is born held and settles exactly once
-- (B2). Placing a budgeted hold reserves its amount in the mandate's budget
-- row, whose CHECK refuses an overrun; voiding gives it back; posting
-- counts it spent, apart, and leaves the reservation as it is.
CREATE OR REPLACE FUNCTION countersign_hold_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'budget holds are never deleted' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'held' OR NEW.settled_at IS NOT NULL THEN
            RAISE EXCEPTION 'a budget hold is born held' USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.budgeted THEN
            UPDATE mandate_budgets SET reserved_minor = reserved_minor + NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'no budget row for mandate % in %', NEW.mandate_hash, NEW.currency
                    USING ERRCODE = 'check_violation';
            END IF;
        END IF;
        RETURN NEW;
    END IF;
    IF (NEW.rail_account, NEW.sik, NEW.hold_seq, NEW.mandate_hash, NEW.currency, NEW.amount_minor, NEW.budgeted)
       IS DISTINCT FROM (OLD.rail_account, OLD.sik, OLD.hold_seq, OLD.mandate_hash, OLD.currency, OLD.amount_minor, OLD.budgeted) THEN
        RAISE EXCEPTION 'a budget hold is immutable but for its settlement' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = OLD.state THEN
        IF NEW.settled_at IS DISTINCT FROM OLD.settled_at THEN
            RAISE EXCEPTION 'budget hold %/%#%: settled_at is immutable but for its settlement', OLD.rail_account, OLD.sik, OLD.hold_seq
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.state <> 'held' THEN
        RAISE EXCEPTION 'budget hold %/%#% is already %: it settles exactly once', OLD.rail_account, OLD.sik, OLD.hold_seq, OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    NEW.settled_at := GREATEST(NEW.settled_at, clock_timestamp());
    IF NEW.budgeted THEN
        IF NEW.state = 'posted' THEN
            INSERT INTO mandate_budget_spent AS s (mandate_hash, currency, shard, spent_minor)
                VALUES (NEW.mandate_hash, NEW.currency, hashtext(NEW.sik) & 15, NEW.amount_minor)
                ON CONFLICT (mandate_hash, currency, shard) DO UPDATE SET spent_minor = s.spent_minor + EXCLUDED.spent_minor;
        ELSE
            UPDATE mandate_budgets SET reserved_minor = reserved_minor - NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

ALTER TABLE mandate_budgets DROP CONSTRAINT budget_never_exceeded, DROP COLUMN overrun_minor,
    ADD CONSTRAINT budget_never_exceeded CHECK (reserved_minor <= budget_minor);
ALTER TABLE budget_holds DROP COLUMN beyond_budget;
