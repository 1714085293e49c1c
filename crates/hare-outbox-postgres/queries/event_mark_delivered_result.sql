-- {relay_commit}: see PgBackend::with_synchronous_relay_commits.
-- event_mark_delivered that also stores each attempt's record in the result column
-- {result_column}: $1 sequences, $2 the clock (NULL = the database's now()), $3 records as JSON text (NULL keeps the column).
-- An event another relay already published keeps its first published_at and its record.
UPDATE {table} t
SET published_at = COALESCE($2::timestamptz, now()),
    lease_until = NULL,
    leased_by = NULL,
    dead_lettered_at = NULL,
    {result_column} = COALESCE(r.result::jsonb, t.{result_column})
FROM unnest($1::bigint[], $3::text[]) AS r(sequence, result)
WHERE t.sequence = r.sequence AND t.published_at IS NULL
    AND {relay_commit}
