-- The optional index for the journal's object filter on PostgreSQL (BENCHMARKS.md § Journal
-- pages): the payload's model and key, as the filter compares them. {table} is the outbox table.
CREATE INDEX IF NOT EXISTS "{table}_object_idx" ON "{table}" ((payload -> 'model'), (payload -> 'pk'))
