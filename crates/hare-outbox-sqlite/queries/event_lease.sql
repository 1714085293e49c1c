-- Lease the next batch (DESIGN §7 steps 1-2). Runs in a BEGIN IMMEDIATE transaction.
-- ?1 now, ?2 lease_until, ?3 leased_by, ?4 limit.
-- Due, undelivered, not dead, not leased by a live relay, in sequence order; an event with an
-- ordering key waits while an earlier event of its key is undelivered (failed and dead-lettered
-- included), which also leaves at most one event per key in the batch.
UPDATE {table}
SET lease_until = ?2, leased_by = ?3
WHERE sequence IN (
    SELECT o.sequence
    FROM {table} AS o
    WHERE o.published_at IS NULL
      AND o.dead_lettered_at IS NULL
      AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= ?1)
      AND (o.lease_until IS NULL OR o.lease_until < ?1)
      AND (
          o.ordering_key IS NULL
          OR NOT EXISTS (
              SELECT 1
              FROM {table} AS e
              WHERE e.ordering_key = o.ordering_key
                AND e.sequence < o.sequence
                AND e.published_at IS NULL
          )
      )
    ORDER BY o.sequence
    LIMIT ?4
)
RETURNING
    sequence, id, topic, payload, headers, ordering_key, idempotency_key, created_at, attempts,
    last_error, next_attempt_at, lease_until, leased_by, published_at, dead_lettered_at
