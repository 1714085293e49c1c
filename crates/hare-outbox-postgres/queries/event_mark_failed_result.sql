-- {relay_commit}: see PgBackend::with_synchronous_relay_commits.
-- event_mark_failed that also stores each attempt's record ($7, JSON text; NULL keeps the
-- column) in the result column {result_column}. A failure is recorded only while this relay ($6)
-- still holds the event and nobody published it.
UPDATE {table} t
SET attempts = f.attempts,
    last_error = f.error,
    next_attempt_at = COALESCE($5::timestamptz, now()) + f.retry_in * interval '1 second',
    dead_lettered_at = CASE WHEN f.retry_in IS NULL THEN COALESCE($5::timestamptz, now()) END,
    lease_until = NULL,
    leased_by = NULL,
    {result_column} = COALESCE(f.result::jsonb, t.{result_column})
FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::float8[], $7::text[])
    AS f(sequence, attempts, error, retry_in, result)
WHERE t.sequence = f.sequence AND t.leased_by = $6 AND t.published_at IS NULL
    AND {relay_commit}
