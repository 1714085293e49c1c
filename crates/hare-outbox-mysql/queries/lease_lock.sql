-- Locks the heads ({sequences}) that may still be leased; heads another relay's lease holds
-- locked are skipped, not waited for. {ready:o} is bound after the sequences.
SELECT o.sequence FROM {table} AS o
WHERE o.sequence IN ({sequences}) AND o.undelivered = 1 AND {ready:o}
FOR UPDATE SKIP LOCKED
