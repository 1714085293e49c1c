-- Record one failed delivery, only while the relay still holds the lease and nobody published.
-- ?1 attempts, ?2 last_error, ?3 next_attempt_at, ?4 dead_lettered_at, ?5 sequence, ?6 leased_by.
UPDATE {table}
SET attempts = ?1,
    last_error = ?2,
    next_attempt_at = ?3,
    dead_lettered_at = ?4,
    lease_until = NULL,
    leased_by = NULL
WHERE sequence = ?5
  AND leased_by = ?6
  AND published_at IS NULL
