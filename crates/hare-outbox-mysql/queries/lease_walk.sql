-- One step of the lease's walk over ordering keys: the next {scan} undelivered events in
-- pending-key index order after key ? (up to key ? when the walk has wrapped around: {upto}),
-- each with whether it may be leased ({ready:o}, bound first). The first row of each key is its
-- head (its first undelivered event, failed and dead-lettered ones included). A range read of
-- at most {scan} index entries: a key with a long backlog fills a step alone, and the next step
-- seeks past it, so no statement reads more than {scan} rows whatever one key's backlog
-- (MySQL's loose index scan, which would read one entry per key, is the optimizer's choice and
-- was not taken on MariaDB 10.11).
SELECT o.sequence, o.ordering_key, CAST({ready:o} AS SIGNED) AS ready
FROM {table} AS o FORCE INDEX ({pending_key_idx})
WHERE o.undelivered = 1 AND o.ordering_key > ?{upto}
ORDER BY o.undelivered, o.ordering_key, o.sequence
LIMIT {scan}
