INSERT INTO {table} (id, topic, payload, headers, ordering_key, idempotency_key)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING {columns}
