-- The next undelivered events of one key after its head (bound: {ready:e}, the key, the head's
-- sequence), at most {run_limit}, in sequence order, each with whether it may be leased.
(SELECT e.sequence, CAST({ready:e} AS SIGNED) AS ready
 FROM {table} AS e FORCE INDEX ({pending_key_idx})
 WHERE e.undelivered = 1 AND e.ordering_key = ? AND e.sequence > ?
 ORDER BY e.ordering_key, e.sequence
 LIMIT {run_limit})
