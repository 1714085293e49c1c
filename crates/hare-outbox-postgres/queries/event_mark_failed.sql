-- {relay_commit}: see PgBackend::with_synchronous_relay_commits.
-- $1 sequences, $2 attempts, $3 errors, $4 seconds until the next attempt (NULL = dead-letter),
-- $5 the clock (NULL = the database's now()), $6 leased_by.
-- A failure is recorded only while this relay ($6) still holds the event and nobody published it.
UPDATE {table} t
SET attempts = f.attempts,
    last_error = f.error,
    next_attempt_at = COALESCE($5::timestamptz, now()) + f.retry_in * interval '1 second',
    dead_lettered_at = CASE WHEN f.retry_in IS NULL THEN COALESCE($5::timestamptz, now()) END,
    lease_until = NULL,
    leased_by = NULL
FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::float8[])
    AS f(sequence, attempts, error, retry_in)
WHERE t.sequence = f.sequence AND t.leased_by = $6 AND t.published_at IS NULL
    AND {relay_commit}
