-- Whether the key (?) has an undelivered event before the sequence (?): then the event is not
-- the key's head. A locking read, so a concurrent action on the key waits.
SELECT p.sequence FROM {table} AS p FORCE INDEX ({pending_key_idx})
WHERE p.undelivered = 1 AND p.ordering_key = ? AND p.sequence < ?
ORDER BY p.undelivered, p.ordering_key, p.sequence
LIMIT 1
FOR UPDATE
