-- event_mark_delivered for one event, also storing the attempt's record in the result column
-- {result_column}. ?1 now, ?2 sequence, ?3 the record as JSON text (NULL keeps the column).
-- An event already published keeps its first published_at and its record.
UPDATE {table}
SET published_at = ?1,
    lease_until = NULL,
    leased_by = NULL,
    dead_lettered_at = NULL,
    {result_column} = COALESCE(?3, {result_column})
WHERE sequence = ?2
  AND published_at IS NULL
