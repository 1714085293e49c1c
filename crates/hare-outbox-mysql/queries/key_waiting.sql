-- The undelivered events of one key (?), counted up to {count_cap}.
SELECT COUNT(*) FROM (
    SELECT 1 FROM {table} AS c FORCE INDEX ({pending_key_idx})
    WHERE c.undelivered = 1 AND c.ordering_key = ?
    ORDER BY c.undelivered, c.ordering_key, c.sequence
    LIMIT {count_cap}) AS x
