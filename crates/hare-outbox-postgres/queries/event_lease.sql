-- Lease the next batch (docs/state_machine.md) in one statement.
-- $1 the clock (NULL = the database's now()), $2 lease seconds, $3 leased_by, $4 the key cursor
-- (the last ordering key this relay leased; '' to start), $5..$9 the topic filter: every topic?,
-- included names, included prefixes, excluded names, excluded prefixes.
-- {limit} is the batch size and {run_limit} the events a key may add after its head
-- (max_events_per_key - 1), rendered as literals so the plan is exact and can be cached.
--
-- Ordered keys: a walk over the distinct ordering keys of the pending-key index, starting after
-- the cursor and wrapping around once, visits each key's head (its first undelivered event:
-- failed and dead-lettered ones included, so they hold the key back) with one index probe, and
-- stops after {limit} heads that may be leased. Blocked keys cost one probe each, never a walk
-- over their backlog. Each leased head then takes a run of its key's next events, in sequence
-- order, up to an even share of what the batch has left; the run stops before the first event
-- that may not be leased. Events without a key are taken in sequence order from the same
-- index (NULL keys) and share the batch: keyed and unkeyed rows are interleaved by rank.
-- SKIP LOCKED on heads and unkeyed rows lets several relays share the table; a run is leased
-- only behind a head this statement locked, so no other relay can take it.
WITH RECURSIVE
clock AS (SELECT COALESCE($1::timestamptz, now()) AS now),
walk(ordering_key, sequence, ready, found, wrapped, depth) AS (
    SELECT $4::varchar, NULL::bigint, false, 0, false, 0
    UNION ALL
    SELECT n.ordering_key, n.sequence, n.ready, w.found + n.ready::int, n.wrapped, w.depth + 1
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT c.* FROM (
            -- the next key after the previous one, before wrapping
            (SELECT k.ordering_key, k.sequence, {ready:k} AS ready, false AS wrapped
             FROM {table} k
             WHERE NOT w.wrapped AND k.published_at IS NULL AND k.ordering_key > w.ordering_key
             ORDER BY k.ordering_key, k.sequence
             LIMIT 1)
            UNION ALL
            -- past the last key: wrap around to the first one
            (SELECT k.ordering_key, k.sequence, {ready:k}, true
             FROM {table} k
             WHERE NOT w.wrapped AND k.published_at IS NULL AND k.ordering_key IS NOT NULL
               AND k.ordering_key <= $4
             ORDER BY k.ordering_key, k.sequence
             LIMIT 1)
            UNION ALL
            -- after wrapping: the next key, up to the cursor
            (SELECT k.ordering_key, k.sequence, {ready:k}, true
             FROM {table} k
             WHERE w.wrapped AND k.published_at IS NULL AND k.ordering_key > w.ordering_key
               AND k.ordering_key <= $4
             ORDER BY k.ordering_key, k.sequence
             LIMIT 1)
        ) c
        LIMIT 1
    ) n
    WHERE w.found < {limit}
),
heads AS (
    SELECT o.sequence, o.ordering_key, w.depth
    FROM walk w
    JOIN {table} o ON o.sequence = w.sequence
    WHERE w.ready AND o.published_at IS NULL AND {ready:o}
    FOR UPDATE OF o SKIP LOCKED
),
share AS (
    SELECT LEAST({run_limit}, CEIL(({limit} - count(*))::numeric / GREATEST(count(*), 1)))::int
           AS per_key
    FROM heads
),
keyed AS (
    SELECT h.sequence, 1::bigint AS pos, h.depth, h.ordering_key FROM heads h
    UNION ALL
    SELECT r.sequence, r.pos, h.depth, h.ordering_key
    FROM heads h
    CROSS JOIN LATERAL (
        SELECT x.sequence, x.pos
        FROM (
            SELECT e.sequence, 1 + row_number() OVER (ORDER BY e.sequence) AS pos,
                   bool_and({ready:e}) OVER (ORDER BY e.sequence) AS ok
            FROM (
                SELECT *
                FROM {table} e
                WHERE e.ordering_key = h.ordering_key AND e.published_at IS NULL
                  AND e.sequence > h.sequence
                ORDER BY e.ordering_key, e.sequence
                LIMIT {run_limit}
            ) e
        ) x
        WHERE x.ok
        LIMIT (SELECT per_key FROM share)
    ) r
),
unkeyed AS (
    SELECT u.sequence
    FROM {table} u
    WHERE u.ordering_key IS NULL AND u.published_at IS NULL AND {ready:u}
    ORDER BY u.sequence
    LIMIT {limit}
    FOR UPDATE OF u SKIP LOCKED
),
chosen AS (
    SELECT c.sequence, c.depth, c.ordering_key
    FROM (
        SELECT k.sequence, k.depth, k.ordering_key,
               row_number() OVER (ORDER BY k.pos, k.depth) AS rank, 0 AS class
        FROM keyed k
        UNION ALL
        SELECT u.sequence, NULL, NULL, row_number() OVER (ORDER BY u.sequence), 1
        FROM unkeyed u
    ) c
    ORDER BY c.rank, c.class
    LIMIT {limit}
)
UPDATE {table} t
SET lease_until = (SELECT now FROM clock) + $2 * interval '1 second', leased_by = $3
FROM chosen c
WHERE t.sequence = c.sequence AND t.published_at IS NULL
RETURNING {t_columns},
    (SELECT k.ordering_key FROM chosen k WHERE k.depth IS NOT NULL ORDER BY k.depth DESC LIMIT 1)
        AS key_cursor
