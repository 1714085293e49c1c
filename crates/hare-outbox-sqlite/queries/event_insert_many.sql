-- One chunk of a run of same-shape messages: one row of parameters per message, in the given
-- order (rows are inserted, and take their sequence, in that order), each binding id, topic,
-- payload (JSON text), headers (JSON text), ordering_key, idempotency_key, created_at, then the
-- extra columns the run sets. A stored or repeated idempotency key inserts nothing and returns
-- no row. RETURNING order is not guaranteed: the caller matches rows to messages by id.
INSERT INTO {table} ({insert_columns})
VALUES {insert_rows}
{on_conflict}
RETURNING
    {columns}
