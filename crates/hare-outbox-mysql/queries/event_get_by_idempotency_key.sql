-- The stored events of some idempotency keys ({keys}: one placeholder per key). A locking read:
-- it sees the latest committed rows whatever the transaction's snapshot, and waits for a writer
-- of the same key that has not committed yet.
SELECT {columns} FROM {table} WHERE idempotency_key IN ({keys}) LOCK IN SHARE MODE
