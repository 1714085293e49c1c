-- One event. ?1 id, ?2 topic, ?3 payload (JSON text), ?4 headers (JSON text), ?5 ordering_key,
-- ?6 idempotency_key, ?7 created_at. A stored idempotency key inserts nothing and returns no row.
INSERT INTO {table} (id, topic, payload, headers, ordering_key, idempotency_key, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING
    sequence, id, topic, payload, headers, ordering_key, idempotency_key, created_at, attempts,
    last_error, next_attempt_at, lease_until, leased_by, published_at, dead_lettered_at
