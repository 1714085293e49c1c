-- One event by id. ?1 id (hyphenated UUID text).
SELECT
    sequence, id, topic, payload, headers, ordering_key, idempotency_key, created_at, attempts,
    last_error, next_attempt_at, lease_until, leased_by, published_at, dead_lettered_at
FROM {table}
WHERE id = ?1
