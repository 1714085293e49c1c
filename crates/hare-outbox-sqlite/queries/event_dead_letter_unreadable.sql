-- Dead-letter one leased row the backend cannot read (a payload or headers that are not JSON, a
-- time that is not a timestamp: written by hand or by another program), so it holds back only its
-- own key instead of failing every lease. Runs in the lease's transaction.
-- ?1 dead_lettered_at, ?2 last_error, ?3 sequence.
UPDATE {table}
SET dead_lettered_at = ?1,
    last_error = ?2,
    next_attempt_at = NULL,
    lease_until = NULL,
    leased_by = NULL
WHERE sequence = ?3
