-- One page of held ordering keys: keys whose head (first undelivered event) is dead-lettered or
-- has failed at least once, so the key's later events wait behind it.
-- ?1 keys after this one ('' = from the first key), ?2 the page size (held keys), ?3 the most
-- keys walked, ?4 the cap of each held key's count of undelivered events.
-- As the lease does, a walk over the distinct keys of the pending-key index from the cursor:
-- one index probe per key (the key's head), never a read of a key's backlog. It stops after ?2
-- held keys or ?3 keys walked, so a page costs the same however many keys are healthy. Every
-- row carries last_key (the last key walked: where the next page starts) and walked (how many
-- keys were walked); with no held key, one row of NULL event columns carries them. Keys compare
-- with SQLite's BINARY collation, the byte order Rust's strings sort in.
WITH RECURSIVE
walk(ordering_key, sequence, held, found, depth) AS (
    SELECT ?1, NULL, 0, 0, 0
    UNION ALL
    SELECT o.ordering_key, o.sequence,
           (o.dead_lettered_at IS NOT NULL OR o.attempts > 0),
           w.found + (o.dead_lettered_at IS NOT NULL OR o.attempts > 0),
           w.depth + 1
    FROM walk AS w
    JOIN {table} AS o ON o.sequence = (
        SELECT k.sequence FROM {table} AS k INDEXED BY {pending_key_idx}
        WHERE k.published_at IS NULL AND k.ordering_key > w.ordering_key
        ORDER BY k.ordering_key, k.sequence
        LIMIT 1)
    WHERE w.found < ?2 AND w.depth < ?3
),
walked AS MATERIALIZED (
    SELECT ordering_key, sequence, held, depth FROM walk
),
outcome AS (
    SELECT (SELECT ordering_key FROM walked WHERE depth > 0 ORDER BY depth DESC LIMIT 1)
               AS last_key,
           (SELECT max(depth) FROM walked) AS walked
)
SELECT h.*, o.last_key, o.walked
FROM outcome AS o
LEFT JOIN (
    SELECT {columns},
           (SELECT count(*) FROM (
               SELECT 1 FROM {table} AS c INDEXED BY {pending_key_idx}
               WHERE c.ordering_key = t.ordering_key AND c.published_at IS NULL
               ORDER BY c.ordering_key, c.sequence
               LIMIT ?4)) AS waiting
    FROM {table} AS t
    WHERE t.sequence IN (SELECT sequence FROM walked WHERE held)
) AS h ON 1
