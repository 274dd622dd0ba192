-- +goose Up
-- approval.opened: an event for each approval opened, in the transaction
-- that opens it. intent.held is written once, when the intent enters HELD;
-- an approval opened for the same intent later (the same request with
-- other labels, a retry of a request the rail refused held in place, the
-- request again under a new mandate) had no event, and intent.held carries
-- no approval id, so an integration that reviews holds from its webhooks
-- could not know what it was asked to approve (found by a review). The
-- payload names the approval, its binding (the request's fingerprint and
-- its labels' digest: the labels themselves are text the agent wrote, read
-- with GetApproval) and the request; the owner is the approval's.

-- +goose StatementBegin
CREATE FUNCTION countersign_approval_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_at timestamptz := clock_timestamp();
    v_it intents%ROWTYPE;
BEGIN
    SELECT * INTO STRICT v_it FROM intents WHERE rail_account = NEW.rail_account AND sik = NEW.sik;
    v_id := nextval(pg_get_serial_sequence('outbox', 'id'));
    INSERT INTO outbox (id, owner_id, event_type, rail_account, sik, payload, created_at)
    OVERRIDING SYSTEM VALUE
    VALUES (v_id, NEW.owner_id, 'approval.opened', NEW.rail_account, NEW.sik, jsonb_build_object(
        'id', v_id::text,
        'event', 'approval.opened',
        'occurred_at', to_char(v_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'approval_id', NEW.id,
        'expires_at', to_char(NEW.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'request_fingerprint', NEW.fingerprint,
        'labels_digest', encode(sha256(convert_to(NEW.labels, 'UTF8')), 'hex'),
        'mandate_hash', NEW.mandate_hash,
        'agent_id', NEW.agent_id,
        'rail_account', NEW.rail_account,
        'sik', NEW.sik,
        'rail', v_it.rail,
        'action', v_it.action,
        'state', v_it.state,
        'subject', v_it.subject,
        'amount_minor', v_it.amount_minor,
        'currency', v_it.currency,
        'payee', v_it.payee), v_at);
    INSERT INTO outbox_deliveries (outbox_id, webhook_id, next_attempt_at)
        SELECT v_id, w.id, v_at FROM webhooks w
        WHERE w.owner_id = NEW.owner_id AND w.deleted_at IS NULL
          AND (cardinality(w.event_types) = 0 OR 'approval.opened' = ANY (w.event_types));
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER approvals_outbox AFTER INSERT ON approvals
    FOR EACH ROW EXECUTE FUNCTION countersign_approval_outbox();

-- +goose Down
DROP TRIGGER approvals_outbox ON approvals;
DROP FUNCTION countersign_approval_outbox();
