-- {relay_commit}: see PgBackend::with_synchronous_relay_commits.
-- $1 sequences, $2 the clock (NULL = the database's now()).
-- An event another relay already published keeps its first published_at.
UPDATE {table}
SET published_at = COALESCE($2::timestamptz, now()), lease_until = NULL, leased_by = NULL, dead_lettered_at = NULL
WHERE sequence = ANY($1) AND published_at IS NULL
    AND {relay_commit}
