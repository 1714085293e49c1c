-- $1 now, $2 lease_until, $3 leased_by, $4 limit, $5..$9 the topic filter: every topic?,
-- included names, included prefixes, excluded names, excluded prefixes.
-- Candidates: due, undelivered, not dead, not leased by a live relay, and, for an ordering key,
-- no earlier undelivered event of that key (failed and dead-lettered included). That also means at
-- most one event per key per batch. SKIP LOCKED lets several relays share the table.
WITH candidates AS (
    SELECT o.sequence
    FROM {table} o
    WHERE o.published_at IS NULL
      AND o.dead_lettered_at IS NULL
      AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= $1)
      AND (o.lease_until IS NULL OR o.lease_until < $1)
      AND (o.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM {table} e
            WHERE e.ordering_key = o.ordering_key
              AND e.sequence < o.sequence
              AND e.published_at IS NULL))
      AND ($5::boolean OR o.topic = ANY($6::text[])
           OR EXISTS (SELECT 1 FROM unnest($7::text[]) AS p(prefix) WHERE starts_with(o.topic, p.prefix)))
      AND NOT (o.topic = ANY($8::text[])
           OR EXISTS (SELECT 1 FROM unnest($9::text[]) AS p(prefix) WHERE starts_with(o.topic, p.prefix)))
    ORDER BY o.sequence
    LIMIT $4
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE {table} t
SET lease_until = $2, leased_by = $3
FROM candidates c
WHERE t.sequence = c.sequence
RETURNING {t_columns}
