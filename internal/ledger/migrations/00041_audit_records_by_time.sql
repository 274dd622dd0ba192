-- +goose Up
-- A WatchIntents stream pages, five times a second, through the last few
-- seconds of its owner's audit records by at_micros (OwnerTransitionPositions).
-- Nothing indexed at_micros, so every poll read the whole table: 4.7 ms at
-- 60,000 records, growing with the ledger's whole history, for each open
-- watch. at_micros is the insert's clock, so it follows the table's
-- physical order: a BRIN index (one summary per 128 pages) lets the poll
-- read only the last ranges (0.8 ms at 60,000 records, the same at any
-- size), and costs a decision's inserts next to nothing (a range is
-- summarised once full, by autovacuum), unlike a B-tree entry per record.
CREATE INDEX audit_records_at ON audit_records USING brin (at_micros) WITH (autosummarize = on);

-- +goose Down
DROP INDEX audit_records_at;
