-- One page of held ordering keys: keys whose head (first undelivered event) is dead-lettered or
-- has failed at least once, so the key's later events wait behind it.
-- $1 keys after this one ('' = from the first key), $2 the page size (held keys), $3 the most
-- keys walked, $4 the cap of each held key's count of undelivered events.
-- As the lease does, a walk over the distinct keys of the pending-key index from the cursor:
-- one index probe per key (the key's head), never a read of a key's backlog. It stops after $2
-- held keys or $3 keys walked, so a page costs the same however many keys are healthy. Every
-- row carries last_key (the last key walked: where the next page starts) and walked (how many
-- keys were walked); with no held key, one row of NULL event columns carries them.
WITH RECURSIVE
walk(ordering_key, sequence, held, found, depth) AS (
    SELECT $1::varchar, NULL::bigint, false, 0, 0
    UNION ALL
    SELECT n.ordering_key, n.sequence, n.held, w.found + n.held::int, w.depth + 1
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT k.ordering_key, k.sequence,
               (k.dead_lettered_at IS NOT NULL OR k.attempts > 0) AS held
        FROM {table} k
        WHERE k.published_at IS NULL AND k.ordering_key > w.ordering_key
        ORDER BY k.ordering_key, k.sequence
        LIMIT 1
    ) n
    WHERE w.found < $2 AND w.depth < $3
),
outcome AS (
    SELECT (SELECT w.ordering_key FROM walk w WHERE w.depth > 0 ORDER BY w.depth DESC LIMIT 1)
               AS last_key,
           (SELECT max(w.depth) FROM walk w) AS walked
)
SELECT h.*, o.last_key, o.walked
FROM outcome o
LEFT JOIN LATERAL (
    SELECT {columns},
           (SELECT count(*) FROM (
               SELECT 1 FROM {table} c
               WHERE c.ordering_key = t.ordering_key AND c.published_at IS NULL
               ORDER BY c.ordering_key, c.sequence
               LIMIT $4) x) AS waiting
    FROM {table} t
    WHERE t.sequence IN (SELECT w.sequence FROM walk w WHERE w.held)
) h ON true
