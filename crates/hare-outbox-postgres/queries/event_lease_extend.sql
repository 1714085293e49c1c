-- {relay_commit}: see PgBackend::with_synchronous_relay_commits.
-- Extend the lease of a batch still held by its relay: $1 sequences, $2 leased_by, $3 lease
-- seconds, $4 the clock (NULL = the database's now()).
UPDATE {table}
SET lease_until = COALESCE($4::timestamptz, now()) + $3 * interval '1 second'
WHERE sequence = ANY($1) AND leased_by = $2 AND published_at IS NULL
    AND {relay_commit}
