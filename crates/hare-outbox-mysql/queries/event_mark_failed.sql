-- One failure, recorded only while this relay still holds the event and nobody published it:
-- attempts, error, next_attempt_at (NULL when dead), dead_lettered_at (NULL when retried),
-- {result_set} (the record, when a result column is set), the sequence, leased_by.
UPDATE {table}
SET attempts = ?, last_error = ?, next_attempt_at = ?, dead_lettered_at = ?,
    lease_until = NULL, leased_by = NULL{result_set}
WHERE sequence = ? AND leased_by = ? AND published_at IS NULL
