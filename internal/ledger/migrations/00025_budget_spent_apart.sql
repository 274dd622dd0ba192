-- +goose Up
-- A posted hold no longer writes its mandate's budget row. The row held
-- the held and the spent amounts, so the APPLIED commit of every ALLOW
-- (which posts its hold) locked the row that every decision under the
-- mandate locks to place its hold: commits and decisions queued on one
-- row, and a commit kept it through its other writes and its WAL flush.
-- Posting moves an amount from held to spent and leaves their sum, which
-- is all B1 bounds, as it was. So the row now keeps that sum alone
-- (reserved_minor: held and posted, never more than the budget), written
-- when a hold is placed or voided; the spent amount is counted apart, in
-- rows only posting writes. Held is reserved less spent, both read in one
-- statement. The spent amount is split over 16 rows, by the intent's SIK,
-- so that the commits of a hot mandate's ALLOWs do not queue on one row in
-- their turn: each adds to one of them, and a reader sums them.
ALTER TABLE mandate_budgets DROP CONSTRAINT budget_never_exceeded;
UPDATE mandate_budgets SET held_minor = held_minor + spent_minor;
ALTER TABLE mandate_budgets RENAME COLUMN held_minor TO reserved_minor;

CREATE TABLE mandate_budget_spent (
    mandate_hash text     NOT NULL,
    currency     text     NOT NULL,
    shard        smallint NOT NULL CHECK (shard BETWEEN 0 AND 15),
    spent_minor  bigint   NOT NULL CHECK (spent_minor >= 0),
    PRIMARY KEY (mandate_hash, currency, shard),
    FOREIGN KEY (mandate_hash, currency) REFERENCES mandate_budgets (mandate_hash, currency)
);
INSERT INTO mandate_budget_spent (mandate_hash, currency, shard, spent_minor)
    SELECT mandate_hash, currency, 0, spent_minor FROM mandate_budgets WHERE spent_minor > 0;
ALTER TABLE mandate_budgets DROP COLUMN spent_minor;
ALTER TABLE mandate_budgets ADD CONSTRAINT budget_never_exceeded CHECK (reserved_minor <= budget_minor);

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

-- +goose Down
-- +goose StatementBegin
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
            UPDATE mandate_budgets SET held_minor = held_minor + NEW.amount_minor
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
            UPDATE mandate_budgets SET held_minor = held_minor - NEW.amount_minor, spent_minor = spent_minor + NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
        ELSE
            UPDATE mandate_budgets SET held_minor = held_minor - NEW.amount_minor
                WHERE mandate_hash = NEW.mandate_hash AND currency = NEW.currency;
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
ALTER TABLE mandate_budgets DROP CONSTRAINT budget_never_exceeded;
ALTER TABLE mandate_budgets RENAME COLUMN reserved_minor TO held_minor;
ALTER TABLE mandate_budgets ADD COLUMN spent_minor bigint NOT NULL DEFAULT 0 CHECK (spent_minor >= 0);
UPDATE mandate_budgets b SET spent_minor = s.spent_minor, held_minor = b.held_minor - s.spent_minor
    FROM (SELECT mandate_hash, currency, sum(spent_minor) AS spent_minor FROM mandate_budget_spent GROUP BY 1, 2) s
    WHERE s.mandate_hash = b.mandate_hash AND s.currency = b.currency;
DROP TABLE mandate_budget_spent;
ALTER TABLE mandate_budgets ADD CONSTRAINT budget_never_exceeded CHECK (held_minor + spent_minor <= budget_minor);
