-- Extend the lease of a batch still held by its relay.
-- ?1 lease_until, ?2 sequences (JSON array of integers), ?3 leased_by.
UPDATE {table}
SET lease_until = ?1
WHERE sequence IN (SELECT value FROM json_each(?2))
  AND leased_by = ?3
  AND published_at IS NULL
