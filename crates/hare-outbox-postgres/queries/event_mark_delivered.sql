-- An event another relay already published keeps its first published_at.
UPDATE {table}
SET published_at = $2, lease_until = NULL, leased_by = NULL, dead_lettered_at = NULL
WHERE sequence = ANY($1) AND published_at IS NULL
