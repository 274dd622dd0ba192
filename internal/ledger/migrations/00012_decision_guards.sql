-- +goose Up
-- A decision's writes go to PostgreSQL as one pipelined implicit
-- transaction (ledger.Write): one client round trip, all or nothing. The
-- gates decided in Go on what was read before; the statements at the end of
-- the batch re-assert, under the locks the batch takes last, that what the
-- gates relied on still holds (the credential, agent and mandate are still
-- live; every sliding window, the recurrence limit, the fee budget and the
-- refundable balance still have room). A failed assertion aborts the whole
-- transaction with SQLSTATE CSG01, and the engine decides again the slow way.

-- +goose StatementBegin
-- countersign_assert raises CSG01 naming what no longer holds.
CREATE FUNCTION countersign_assert(ok boolean, what text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION 'countersign guard: %', what USING ERRCODE = 'CSG01';
    END IF;
    RETURN true;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION countersign_assert(boolean, text);
