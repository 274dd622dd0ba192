-- +goose Up
-- An attempt through Envoy (with ext_proc in the path) that ext_proc never
-- marked sent never left: ext_proc marks every request it lets leave, in
-- the statement that checks the attempt is pending and its lease live, and
-- stops it if the mark fails; once the attempt's outcome has moved on from
-- pending (its lease expired, or ext_proc stopped it), no mark can come. The reconciler nevertheless proved such an
-- attempt absent by reading the rail's listing to its end, which shows
-- nothing more (the rails show only the body stamp, which only ext_proc
-- writes) and costs one list call of the account's shared rate limit per
-- hundred entities: an agent that dropped its allowed payouts before they
-- left made the reconciler read every payout of the account once per
-- request, with no money moving (found by a review: ten list calls per
-- request over a thousand payouts). A finding may now say the attempt never
-- left (never_sent): an absence with no listing, accepted only for such an
-- attempt, and only when no earlier attempt under the same stamp may have
-- left (a retry after a proven absence keeps the stamp, and a listing may
-- still show the earlier attempt's entity).
ALTER TABLE reconciliation_findings ADD COLUMN never_sent boolean NOT NULL DEFAULT false;

-- +goose StatementBegin
DO $$
DECLARE
    v_name text;
BEGIN
    SELECT conname INTO STRICT v_name FROM pg_constraint
        WHERE conrelid = 'reconciliation_findings'::regclass AND contype = 'c'
          AND pg_get_constraintdef(oid) LIKE '%pages >= 1%';
    EXECUTE format('ALTER TABLE reconciliation_findings DROP CONSTRAINT %I', v_name);
END;
$$;
-- +goose StatementEnd

-- Absence on page one is not absence; an attempt that never left needs no
-- page. pagination_exhausted then says that nothing more could show it.
ALTER TABLE reconciliation_findings
    ADD CONSTRAINT findings_absence_shown CHECK (outcome <> 'confirmed_absent' OR (pagination_exhausted AND (pages >= 1 OR never_sent))),
    ADD CONSTRAINT findings_never_sent_is_absent CHECK (NOT never_sent OR (outcome = 'confirmed_absent' AND pages = 0));

-- +goose StatementBegin
CREATE FUNCTION countersign_finding_never_sent() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM attempts a
        WHERE a.rail_account = NEW.rail_account AND a.sik = NEW.sik AND a.attempt_seq = NEW.attempt_seq
          AND a.via_envoy AND NOT a.body_stamped AND NOT a.left_unstamped
          AND a.outcome <> 'pending'
          -- A retry after a proven absence keeps its stamp: a listing may
          -- still show an earlier attempt's entity under it.
          AND NOT EXISTS (SELECT 1 FROM attempts e
              WHERE e.rail_account = a.rail_account AND e.sik = a.sik AND e.attempt_seq < a.attempt_seq
                AND e.stamp = a.stamp AND (e.body_stamped OR e.left_unstamped OR NOT e.via_envoy));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'finding for % % attempt %: never_sent, but the attempt was not sent through ext_proc, was marked sent, may still be, or an earlier attempt under its stamp may have left',
            NEW.rail_account, NEW.sik, NEW.attempt_seq USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER findings_never_sent BEFORE INSERT ON reconciliation_findings
    FOR EACH ROW WHEN (NEW.never_sent) EXECUTE FUNCTION countersign_finding_never_sent();

-- +goose Down
DROP TRIGGER findings_never_sent ON reconciliation_findings;
DROP FUNCTION countersign_finding_never_sent();
ALTER TABLE reconciliation_findings DROP CONSTRAINT findings_never_sent_is_absent,
    DROP CONSTRAINT findings_absence_shown;
DELETE FROM reconciliation_findings WHERE never_sent;
ALTER TABLE reconciliation_findings ADD CHECK (outcome <> 'confirmed_absent' OR (pagination_exhausted AND pages >= 1)),
    DROP COLUMN never_sent;
