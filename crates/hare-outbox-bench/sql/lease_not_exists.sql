-- The lease of issue 4 (one event per key, NOT EXISTS over earlier pending rows), replaced by the
-- key walk of queries/event_lease.sql; kept as the comparison of the `lease` benchmark.
WITH candidates AS (
    SELECT o.sequence FROM {table} o
    WHERE o.published_at IS NULL AND o.dead_lettered_at IS NULL
      AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= $1)
      AND (o.lease_until IS NULL OR o.lease_until < $1)
      AND (o.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM {table} e
            WHERE e.ordering_key = o.ordering_key AND e.sequence < o.sequence AND e.published_at IS NULL))
    ORDER BY o.sequence
    LIMIT $4
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE {table} t SET lease_until = $2, leased_by = $3 FROM candidates c WHERE t.sequence = c.sequence
RETURNING t.sequence
