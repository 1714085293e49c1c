-- One step of the lease's walk over ordering keys: the heads (first undelivered event, failed
-- and dead-lettered ones included) of the next {chunk} keys after ?, up to ? when the walk has
-- wrapped around ({upto}), each with whether it may be leased ({ready:o}, bound first). The
-- inner query is a loose scan of the pending-key index: one probe per key, whatever its backlog.
SELECT o.sequence, o.ordering_key, CAST({ready:o} AS SIGNED) AS ready
FROM (SELECT k.ordering_key, MIN(k.sequence) AS head
      FROM {table} AS k FORCE INDEX ({pending_key_idx})
      WHERE k.undelivered = 1 AND k.ordering_key > ?{upto}
      GROUP BY k.ordering_key
      ORDER BY k.ordering_key
      LIMIT {chunk}) AS w
JOIN {table} AS o ON o.sequence = w.head
ORDER BY o.ordering_key
