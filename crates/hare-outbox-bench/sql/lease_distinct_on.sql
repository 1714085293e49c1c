-- Heads of every key by DISTINCT ON over the (ordering_key, sequence) index, plus unkeyed events.
WITH heads AS (
    SELECT DISTINCT ON (ordering_key) sequence, dead_lettered_at, next_attempt_at, lease_until
    FROM {table}
    WHERE published_at IS NULL AND ordering_key IS NOT NULL
    ORDER BY ordering_key, sequence
), candidates AS (
    SELECT o.sequence FROM {table} o
    WHERE o.sequence IN (
        SELECT h.sequence FROM heads h
        WHERE h.dead_lettered_at IS NULL
          AND (h.next_attempt_at IS NULL OR h.next_attempt_at <= $1)
          AND (h.lease_until IS NULL OR h.lease_until < $1)
        UNION ALL
        SELECT u.sequence FROM {table} u
        WHERE u.ordering_key IS NULL AND u.published_at IS NULL AND u.dead_lettered_at IS NULL
          AND (u.next_attempt_at IS NULL OR u.next_attempt_at <= $1)
          AND (u.lease_until IS NULL OR u.lease_until < $1))
    ORDER BY o.sequence
    LIMIT $4
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE {table} t SET lease_until = $2, leased_by = $3 FROM candidates c WHERE t.sequence = c.sequence
RETURNING t.sequence
