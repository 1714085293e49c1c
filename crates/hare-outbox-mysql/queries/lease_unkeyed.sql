-- Events without an ordering key that may be leased, in sequence order, locked; rows another
-- relay holds locked are skipped. {ready:u} bound.
SELECT u.sequence FROM {table} AS u FORCE INDEX ({pending_key_idx})
WHERE u.undelivered = 1 AND u.ordering_key IS NULL AND {ready:u}
ORDER BY u.ordering_key, u.sequence
LIMIT {limit}
FOR UPDATE SKIP LOCKED
