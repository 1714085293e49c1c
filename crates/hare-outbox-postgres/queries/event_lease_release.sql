-- {relay_commit}: see PgBackend::with_synchronous_relay_commits.
-- Release leased events without counting an attempt (the rest of a run after a failure), only
-- while this relay still holds them: $1 sequences, $2 leased_by.
UPDATE {table}
SET lease_until = NULL, leased_by = NULL
WHERE sequence = ANY($1) AND leased_by = $2 AND published_at IS NULL
    AND {relay_commit}
