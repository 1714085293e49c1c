-- Mark delivered events published in one statement. ?1 now, ?2 sequences (JSON array of integers).
-- An event already published keeps its first published_at.
UPDATE {table}
SET published_at = ?1, lease_until = NULL, leased_by = NULL, dead_lettered_at = NULL
WHERE sequence IN (SELECT value FROM json_each(?2))
  AND published_at IS NULL
