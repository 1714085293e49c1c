-- Lease the next batch (DESIGN §7 steps 1-2). Runs in a BEGIN IMMEDIATE transaction.
-- ?1 now, ?2 lease_until, ?3 leased_by, ?4 limit, ?5..?9 the topic filter: every topic? (0/1),
-- included names, included prefixes, excluded names, excluded prefixes (JSON arrays of strings).
-- Prefixes match literally and case-sensitively (substr, never LIKE or GLOB).
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
      AND (
          ?5
          OR o.topic IN (SELECT value FROM json_each(?6))
          OR EXISTS (
              SELECT 1 FROM json_each(?7) AS p
              WHERE substr(o.topic, 1, length(p.value)) = p.value
          )
      )
      AND NOT (
          o.topic IN (SELECT value FROM json_each(?8))
          OR EXISTS (
              SELECT 1 FROM json_each(?9) AS p
              WHERE substr(o.topic, 1, length(p.value)) = p.value
          )
      )
    ORDER BY o.sequence
    LIMIT ?4
)
RETURNING
    {columns}
