-- event_mark_failed that also stores the attempt's record in the result column {result_column}.
-- ?1 attempts, ?2 last_error, ?3 next_attempt_at, ?4 dead_lettered_at, ?5 sequence, ?6 leased_by,
-- ?7 the record as JSON text (NULL keeps the column). Only while the relay still holds the
-- lease and nobody published.
UPDATE {table}
SET attempts = ?1,
    last_error = ?2,
    next_attempt_at = ?3,
    dead_lettered_at = ?4,
    lease_until = NULL,
    leased_by = NULL,
    {result_column} = COALESCE(?7, {result_column})
WHERE sequence = ?5
  AND leased_by = ?6
  AND published_at IS NULL
