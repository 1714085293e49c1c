-- The stored events of several idempotency keys, in one statement (every tenant's: the caller
-- tells its own from another tenant's). ?1 the keys (JSON array of strings; repeats are fine).
SELECT
    {columns}
FROM {table}
WHERE idempotency_key IN (SELECT value FROM json_each(?1))
