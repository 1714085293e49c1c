-- One step of the held keys' walk: the heads of the next {chunk} keys after ? (a loose scan of
-- the pending-key index, one probe per key), each with whether it holds its key back
-- (dead-lettered or failed at least once) and the undelivered events of its key counted up to
-- the cap ({count_cap}); the event columns only of held heads.
SELECT o.sequence AS head, o.ordering_key AS head_key,
       CAST(o.dead_lettered_at IS NOT NULL OR o.attempts > 0 AS SIGNED) AS held
FROM (SELECT k.ordering_key, MIN(k.sequence) AS head
      FROM {table} AS k FORCE INDEX ({pending_key_idx})
      WHERE k.undelivered = 1 AND k.ordering_key > ?
      GROUP BY k.ordering_key
      ORDER BY k.ordering_key
      LIMIT {chunk}) AS w
JOIN {table} AS o ON o.sequence = w.head
ORDER BY o.ordering_key
