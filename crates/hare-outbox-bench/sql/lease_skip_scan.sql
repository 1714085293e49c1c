-- Heads of every key by a recursive loose index scan (one index probe per key), plus unkeyed events.
WITH RECURSIVE heads AS (
    (SELECT ordering_key, sequence FROM {table}
     WHERE published_at IS NULL AND ordering_key IS NOT NULL
     ORDER BY ordering_key, sequence LIMIT 1)
    UNION ALL
    SELECT n.ordering_key, n.sequence FROM heads h, LATERAL (
        SELECT ordering_key, sequence FROM {table}
        WHERE published_at IS NULL AND ordering_key > h.ordering_key
        ORDER BY ordering_key, sequence LIMIT 1) n
), candidates AS (
    SELECT o.sequence FROM {table} o
    WHERE o.sequence IN (
        SELECT h.sequence FROM heads h
        UNION ALL
        SELECT u.sequence FROM {table} u WHERE u.ordering_key IS NULL AND u.published_at IS NULL)
      AND o.dead_lettered_at IS NULL
      AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= $1)
      AND (o.lease_until IS NULL OR o.lease_until < $1)
    ORDER BY o.sequence
    LIMIT $4
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE {table} t SET lease_until = $2, leased_by = $3 FROM candidates c WHERE t.sequence = c.sequence
RETURNING t.sequence
