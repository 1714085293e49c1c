-- One event. ?1 id, ?2 topic, ?3 payload (JSON text), ?4 headers (JSON text), ?5 ordering_key,
-- ?6 idempotency_key, ?7 created_at, then the extra columns the message sets, in the table's
-- order. The conflict clause names the idempotency key's unique columns (none when the table has
-- no such constraint): a stored idempotency key inserts nothing and returns no row.
INSERT INTO {table} ({insert_columns})
VALUES ({insert_values})
{on_conflict}
RETURNING
    {columns}
