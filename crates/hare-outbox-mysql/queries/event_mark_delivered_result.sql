-- event_mark_delivered for one event that also stores its attempt's record (JSON text; NULL
-- keeps the column) in {result_column}: the clock, the record, the sequence.
UPDATE {table}
SET published_at = COALESCE(?, UTC_TIMESTAMP(6)), lease_until = NULL, leased_by = NULL,
    dead_lettered_at = NULL, {result_column} = COALESCE(?, {result_column})
WHERE sequence = ? AND published_at IS NULL
