-- Serializes the migrations of one table until the end of the transaction: a second migrate of
-- the same table waits, then finds the version applied. Keyed by the schema-qualified table
-- name ($1 the schema or NULL for the current one, $2 the table) in the two-key space, apart from
-- the single-key lock of migration_lock_schema.sql. Transaction-scoped (a transaction pooler).
SELECT pg_advisory_xact_lock(
    hashtext('hare_outbox.migrate'),
    hashtext(coalesce($1, current_schema()) || '.' || $2)
)
