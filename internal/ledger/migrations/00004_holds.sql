-- +goose Up
-- Budget holds (DESIGN.md §1 B1, B2): a decision that passes the gates
-- reserves its amount against its mandate's budget in the same transaction
-- as the intent. The hold is posted when the intent is APPLIED, voided when
-- it is proven not applied, and kept while the outcome is unknown.

-- One row per mandate: every deciding transaction under a mandate locks it
-- FOR UPDATE first, so the usage the gates read (windows, budgets, fees) is
-- never read by two deciders at once.
CREATE TABLE mandate_usage (
    mandate_hash    text   PRIMARY KEY CHECK (mandate_hash ~ '^[0-9a-f]{64}$'),
    -- Fees the rail reported on the mandate's applied actions, kept by a
    -- trigger on attempts so the fee gate reads one row.
    fee_spent_minor bigint NOT NULL DEFAULT 0 CHECK (fee_spent_minor >= 0)
);

-- The budget of a mandate per currency. held + spent never exceeds budget,
-- whatever Go believes (B1).
CREATE TABLE mandate_budgets (
    mandate_hash text   NOT NULL,
    currency     text   NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    budget_minor bigint NOT NULL CHECK (budget_minor > 0),
    held_minor   bigint NOT NULL DEFAULT 0 CHECK (held_minor >= 0),
    spent_minor  bigint NOT NULL DEFAULT 0 CHECK (spent_minor >= 0),
    PRIMARY KEY (mandate_hash, currency),
    CONSTRAINT budget_never_exceeded CHECK (held_minor + spent_minor <= budget_minor)
);

CREATE TABLE budget_holds (
    rail_account  text        NOT NULL,
    sik           text        NOT NULL,
    hold_seq      integer     NOT NULL CHECK (hold_seq >= 1),
    mandate_hash  text        NOT NULL,
    agent_id      text        NOT NULL,
    payee_key     text        NOT NULL,
    subject       text        NOT NULL,
    currency      text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount_minor  bigint      NOT NULL CHECK (amount_minor >= 0),
    budgeted      boolean     NOT NULL,
    state         text        NOT NULL DEFAULT 'held' CHECK (state IN ('held', 'posted', 'voided')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    settled_at    timestamptz,
    PRIMARY KEY (rail_account, sik, hold_seq),
    FOREIGN KEY (rail_account, sik) REFERENCES intents (rail_account, sik),
    CHECK ((state = 'held') = (settled_at IS NULL))
);

CREATE INDEX holds_mandate_agent ON budget_holds (mandate_hash, agent_id, created_at) WHERE state <> 'voided';
CREATE INDEX holds_mandate_payee ON budget_holds (mandate_hash, payee_key, created_at) WHERE state <> 'voided';
CREATE INDEX holds_open ON budget_holds (rail_account, sik) WHERE state = 'held';
CREATE INDEX holds_mandate_subject ON budget_holds (mandate_hash, subject) WHERE state <> 'voided';
-- The value gate's outstanding refunds on a subject: only the open ones.
CREATE INDEX intents_open_subject ON intents (rail_account, subject) WHERE state IN ('IN_FLIGHT', 'UNKNOWN', 'RECONCILING');

-- +goose StatementBegin
-- countersign_count_fees adds the fee of an attempt to its mandate's usage
-- when the attempt is settled applied.
CREATE FUNCTION countersign_count_fees() RETURNS trigger
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

CREATE TRIGGER attempts_count_fees AFTER UPDATE OF outcome ON attempts
    FOR EACH ROW EXECUTE FUNCTION countersign_count_fees();

-- +goose StatementBegin
-- countersign_hold_guard: a hold is born held and settles exactly once (B2);
-- each step moves the mandate's budget row, whose CHECK refuses an overrun.
CREATE FUNCTION countersign_hold_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'budget holds are never deleted' USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'held' THEN
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
        RETURN NEW;
    END IF;
    IF OLD.state <> 'held' THEN
        RAISE EXCEPTION 'budget hold %/%#% is already %: it settles exactly once', OLD.rail_account, OLD.sik, OLD.hold_seq, OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    NEW.settled_at := now();
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

CREATE TRIGGER budget_holds_guard BEFORE INSERT OR UPDATE OR DELETE ON budget_holds
    FOR EACH ROW EXECUTE FUNCTION countersign_hold_guard();

-- +goose StatementBegin
-- countersign_settle_holds: the intent's state settles its open hold —
-- posted on APPLIED, voided once the rail is proven not to have applied it
-- (FAILED_TERMINAL, CONFIRMED_NOT_APPLIED) or it is refused (BLOCKED); kept
-- while UNKNOWN, RECONCILING or QUARANTINED.
CREATE FUNCTION countersign_settle_holds() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = OLD.state THEN
        RETURN NULL;
    END IF;
    IF NEW.state = 'APPLIED' THEN
        UPDATE budget_holds SET state = 'posted'
            WHERE rail_account = NEW.rail_account AND sik = NEW.sik AND state = 'held';
    ELSIF NEW.state IN ('FAILED_TERMINAL', 'CONFIRMED_NOT_APPLIED', 'BLOCKED') THEN
        UPDATE budget_holds SET state = 'voided'
            WHERE rail_account = NEW.rail_account AND sik = NEW.sik AND state = 'held';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER intents_settle_holds AFTER UPDATE OF state ON intents
    FOR EACH ROW EXECUTE FUNCTION countersign_settle_holds();

-- +goose Down
DROP TRIGGER attempts_count_fees ON attempts;
DROP FUNCTION countersign_count_fees();
DROP INDEX intents_open_subject;
DROP TRIGGER intents_settle_holds ON intents;
DROP FUNCTION countersign_settle_holds();
DROP TABLE budget_holds;
DROP FUNCTION countersign_hold_guard();
DROP TABLE mandate_budgets;
DROP TABLE mandate_usage;
