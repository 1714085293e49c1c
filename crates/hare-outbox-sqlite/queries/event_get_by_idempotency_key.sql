-- The stored event of an idempotency key. ?1 idempotency_key.
SELECT
    sequence, id, topic, payload, headers, ordering_key, idempotency_key, created_at, attempts,
    last_error, next_attempt_at, lease_until, leased_by, published_at, dead_lettered_at
FROM {table}
WHERE idempotency_key = ?1
