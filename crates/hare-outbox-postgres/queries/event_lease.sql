-- Lease the next batch (docs/state_machine.md) in one statement.
-- $1 the clock (NULL = the database's now()), $2 lease seconds, $3 leased_by, $4 the key cursor
-- (where the previous lease's walk stopped; '' to start), and with a topic filter $5..$9
-- (event_topic_filter.sql). Rendered as literals so the plan is exact and can be cached:
-- {limit} the batch size, {run_limit} the events a key may add after its head
-- (max_events_per_key - 1), {min_keys} how many keys the walk gathers before it may stop, and
-- {fill_cap} (the batch split over {min_keys} keys) how many pending events of a key count
-- towards filling the batch.
--
-- Ordered keys: a walk over the distinct ordering keys of the pending-key index, starting after
-- the cursor and wrapping around once, visits each key's head (its first undelivered event:
-- failed and dead-lettered ones included, so they hold the key back) with one index probe. It
-- stops after {limit} heads that may be leased, or earlier, once it holds {min_keys} of them
-- whose runs can fill the batch: a batch then carries a few keys with long runs instead of one
-- event of every key, and the next lease (while this batch is delivered) finds keys of its own.
-- Blocked keys cost one probe each, never a walk over their backlog. Heads are locked by primary
-- key; each then takes a run of its key's next events, in sequence order, up to an even share of
-- what the batch has left; the run stops before the first event that may not be leased. Events
-- without a key are read in the pending-key index's order (NULL keys) and share the batch:
-- keyed and unkeyed rows are interleaved by rank. SKIP LOCKED on heads and unkeyed rows lets
-- several relays share the table; a run is leased only behind a head this statement locked, so
-- no other relay can take it.
--
-- The statement always returns at least one row: the leased events, or one row of NULL columns
-- when nothing was leased. Every row carries key_cursor (the last key walked, where the next
-- walk starts) and contended (the walk found heads that may be leased but another relay's lease
-- statement held them locked: polling again at once will find the keys after them).
-- {relay_commit} lets the relay's own transaction commit without waiting for the WAL flush
-- (see PgBackend::with_synchronous_relay_commits).
WITH RECURSIVE
clock AS (SELECT COALESCE($1::timestamptz, now()) AS now WHERE {relay_commit}),
walk(ordering_key, sequence, ready, found, filled, wrapped, depth) AS (
    SELECT $4::varchar, NULL::bigint, false, 0, 0::bigint, false, 0
    UNION ALL
    SELECT n.ordering_key, n.sequence, n.ready, w.found + n.ready::int,
           w.filled + CASE WHEN n.ready THEN (
               SELECT count(*) FROM (
                   SELECT 1 FROM {table} f
                   WHERE f.ordering_key = n.ordering_key AND f.published_at IS NULL
                     AND f.sequence >= n.sequence
                   ORDER BY f.ordering_key, f.sequence
                   LIMIT {fill_cap}) r)
           ELSE 0 END,
           n.wrapped, w.depth + 1
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
    ) n (ordering_key, sequence, ready, wrapped)
    WHERE w.found < {limit} AND NOT (w.found >= {min_keys} AND w.filled >= {limit})
),
heads AS (
    SELECT o.sequence, o.ordering_key, w.depth
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT o.sequence, o.ordering_key
        FROM {table} o
        WHERE o.sequence = w.sequence AND o.published_at IS NULL AND {ready:o}
        FOR UPDATE OF o SKIP LOCKED
    ) o
    WHERE w.ready
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
    ORDER BY u.ordering_key, u.sequence
    LIMIT {limit}
    FOR UPDATE OF u SKIP LOCKED
),
chosen AS (
    SELECT c.sequence
    FROM (
        SELECT k.sequence, row_number() OVER (ORDER BY k.pos, k.depth) AS rank, 0 AS class
        FROM keyed k
        UNION ALL
        SELECT u.sequence, row_number() OVER (ORDER BY u.sequence), 1
        FROM unkeyed u
    ) c
    ORDER BY c.rank, c.class
    LIMIT {limit}
),
leased AS (
    UPDATE {table} t
    SET lease_until = (SELECT now FROM clock) + $2 * interval '1 second', leased_by = $3
    FROM chosen c
    WHERE t.sequence = c.sequence AND t.published_at IS NULL
    RETURNING {t_columns}
),
outcome AS (
    SELECT (SELECT w.ordering_key FROM walk w WHERE w.depth > 0 ORDER BY w.depth DESC LIMIT 1)
               AS key_cursor,
           (SELECT count(*) FROM walk w WHERE w.ready) > (SELECT count(*) FROM heads)
               AS contended
)
SELECT l.*, o.key_cursor, o.contended
FROM outcome o
LEFT JOIN leased l ON true
