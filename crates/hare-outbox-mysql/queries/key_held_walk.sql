-- One step of the held keys' walk: the next {scan} undelivered events in pending-key index
-- order after key ?, each with whether it holds its key back (dead-lettered or failed at least
-- once); the first row of each key is its head. A bounded range read, as lease_walk.sql: a key
-- with a long backlog fills a step alone and the next step seeks past it.
SELECT o.sequence AS head, o.ordering_key AS head_key,
       CAST(o.dead_lettered_at IS NOT NULL OR o.attempts > 0 AS SIGNED) AS held
FROM {table} AS o FORCE INDEX ({pending_key_idx})
WHERE o.undelivered = 1 AND o.ordering_key > ?
ORDER BY o.undelivered, o.ordering_key, o.sequence
LIMIT {scan}
