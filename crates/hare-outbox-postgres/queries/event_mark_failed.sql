-- A failure is recorded only while this relay ($6) still holds the event and nobody published it.
UPDATE {table} t
SET attempts = f.attempts,
    last_error = f.error,
    next_attempt_at = f.next_attempt_at,
    dead_lettered_at = f.dead_lettered_at,
    lease_until = NULL,
    leased_by = NULL
FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::timestamptz[], $5::timestamptz[])
    AS f(sequence, attempts, error, next_attempt_at, dead_lettered_at)
WHERE t.sequence = f.sequence AND t.leased_by = $6 AND t.published_at IS NULL
