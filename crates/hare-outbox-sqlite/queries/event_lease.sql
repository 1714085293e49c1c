-- Lease the next batch (docs/state_machine.md). Runs in a BEGIN IMMEDIATE
-- transaction, so no other writer runs meanwhile.
-- ?1 now, ?2 lease_until, ?3 leased_by, ?4 the key cursor (the last ordering key this relay
-- leased; '' to start), ?5..?9 the topic filter: every topic? (0/1), included names, included
-- prefixes, excluded names, excluded prefixes (JSON arrays of strings). Prefixes match literally
-- and case-sensitively (substr, never LIKE or GLOB). Rendered as literals: {limit} the batch
-- size, {run_limit} the events a key may add after its head (max_events_per_key - 1),
-- {min_keys} the keys the walk gathers before it may stop, {fill_cap} how many pending events
-- of a key count towards filling the batch.
--
-- As on PostgreSQL: a walk over the distinct ordering keys of the pending-key index, from the
-- cursor and wrapping around once, finds each key's head (its first undelivered event, failed
-- and dead-lettered ones included) with one probe and stops after {limit} heads that may be
-- leased, or once it holds {min_keys} of them whose runs fill the batch; blocked keys never cost
-- a walk over their backlog. Each head takes a run of its key's
-- next events up to an even share of the batch, stopping before the first that may not be
-- leased; events without a key come in sequence order; both kinds are interleaved by rank.
-- Keys compare with SQLite's BINARY collation, the byte order Rust's strings sort in.
WITH RECURSIVE
walk(ordering_key, sequence, ready, found, filled, depth) AS (
    SELECT ?4, NULL, 0, 0, 0, 0
    UNION ALL
    SELECT o.ordering_key, o.sequence, {ready:o}, w.found + {ready:o},
           w.filled + CASE WHEN {ready:o} THEN (
               SELECT count(*) FROM (
                   SELECT 1 FROM {table} AS f INDEXED BY {pending_key_idx}
                   WHERE f.ordering_key = o.ordering_key AND f.published_at IS NULL
                     AND f.sequence >= o.sequence
                   ORDER BY f.ordering_key, f.sequence LIMIT {fill_cap}))
           ELSE 0 END,
           w.depth + 1
    FROM walk AS w
    JOIN {table} AS o ON o.sequence = coalesce(
        -- the next key after the previous one, before wrapping
        (SELECT k.sequence FROM {table} AS k INDEXED BY {pending_key_idx}
         WHERE (w.depth = 0 OR w.ordering_key > ?4)
           AND k.published_at IS NULL AND k.ordering_key > w.ordering_key
         ORDER BY k.ordering_key, k.sequence LIMIT 1),
        -- past the last key: wrap around to the first one
        (SELECT k.sequence FROM {table} AS k INDEXED BY {pending_key_idx}
         WHERE (w.depth = 0 OR w.ordering_key > ?4)
           AND k.published_at IS NULL AND k.ordering_key IS NOT NULL AND k.ordering_key <= ?4
         ORDER BY k.ordering_key, k.sequence LIMIT 1),
        -- after wrapping: the next key, up to the cursor
        (SELECT k.sequence FROM {table} AS k INDEXED BY {pending_key_idx}
         WHERE w.depth > 0 AND w.ordering_key <= ?4
           AND k.published_at IS NULL AND k.ordering_key > w.ordering_key
           AND k.ordering_key <= ?4
         ORDER BY k.ordering_key, k.sequence LIMIT 1))
    WHERE w.found < {limit} AND NOT (w.found >= {min_keys} AND w.filled >= {limit})
),
heads AS MATERIALIZED (
    SELECT sequence, ordering_key, depth FROM walk WHERE ready AND depth > 0
),
share AS (
    SELECT min({run_limit}, ({limit} - 1) / max(count(*), 1)) AS per_key FROM heads
),
bounds AS MATERIALIZED (
    -- each head with the sequence its run may reach: the per_key-th event after it, or any
    SELECT h.sequence, h.ordering_key, h.depth, coalesce(
               (SELECT b.sequence FROM {table} AS b INDEXED BY {pending_key_idx}
                WHERE b.ordering_key = h.ordering_key AND b.published_at IS NULL
                  AND b.sequence > h.sequence
                ORDER BY b.ordering_key, b.sequence
                LIMIT 1 OFFSET (SELECT per_key FROM share) - 1),
               9223372036854775807) AS bound
    FROM heads AS h
    WHERE (SELECT per_key FROM share) > 0
),
runs AS (
    SELECT e.sequence, h.depth,
           1 + row_number() OVER (PARTITION BY h.ordering_key ORDER BY e.sequence) AS pos,
           min({ready:e}) OVER (PARTITION BY h.ordering_key ORDER BY e.sequence) AS ok
    FROM bounds AS h
    JOIN {table} AS e INDEXED BY {pending_key_idx}
      ON e.ordering_key = h.ordering_key AND e.published_at IS NULL
     AND e.sequence > h.sequence AND e.sequence <= h.bound
),
keyed AS (
    SELECT sequence, 1 AS pos, depth FROM heads
    UNION ALL
    SELECT sequence, pos, depth FROM runs WHERE ok
),
unkeyed AS (
    SELECT u.sequence
    FROM {table} AS u INDEXED BY {pending_key_idx}
    WHERE u.ordering_key IS NULL AND u.published_at IS NULL AND {ready:u}
    ORDER BY u.sequence
    LIMIT {limit}
),
chosen AS (
    SELECT sequence FROM (
        SELECT sequence, row_number() OVER (ORDER BY pos, depth) AS rank, 0 AS class FROM keyed
        UNION ALL
        SELECT sequence, row_number() OVER (ORDER BY sequence), 1 FROM unkeyed
    )
    ORDER BY rank, class
    LIMIT {limit}
)
UPDATE {table}
SET lease_until = ?2, leased_by = ?3
WHERE sequence IN (SELECT sequence FROM chosen)
RETURNING
    {columns}
