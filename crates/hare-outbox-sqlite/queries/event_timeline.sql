-- The counts of a journal timeline, one row per combination of the buckets an
-- event was created, published, dead-lettered and finished in, with how many events share it;
-- the backend adds them up per bucket.
-- ?1 since, ?2 until (timestamp text), ?3 since, ?4 until (microseconds since the Unix epoch),
-- ?5 the bucket width (microseconds), ?6 the number of buckets.
-- Timestamps are read to the microsecond from the fixed format YYYY-MM-DDTHH:MM:SS.ffffffZ
-- (integer arithmetic, so an event on a bucket's edge lands in the later bucket, exactly).
-- A bucket is -1 before ?1 (it only feeds the backlog at the first bucket's end) and NULL for
-- no time or a time at or after ?2.
-- An event is in the backlog at time T when created before T and neither published nor
-- dead-lettered before T; it leaves ("finished") at the later of its creation and its first
-- finish. Rows outside every bucket and never in the backlog during the window are skipped:
-- created at or after ?2, or finished before ?1.
-- The inner query's LIMIT -1 (no limit) keeps SQLite from flattening it into the outer one,
-- which would parse every timestamp once per use instead of once; it streams, nothing is
-- written to a temporary table.
SELECT
    CASE WHEN created < ?3 THEN -1 ELSE min((created - ?3) / ?5, ?6 - 1) END AS created,
    CASE
        WHEN published IS NULL OR published >= ?4 THEN NULL
        WHEN published < ?3 THEN -1
        ELSE min((published - ?3) / ?5, ?6 - 1)
    END AS published,
    CASE
        WHEN dead_lettered IS NULL OR dead_lettered >= ?4 THEN NULL
        WHEN dead_lettered < ?3 THEN -1
        ELSE min((dead_lettered - ?3) / ?5, ?6 - 1)
    END AS dead_lettered,
    CASE
        WHEN finished IS NULL OR finished >= ?4 THEN NULL
        WHEN finished < ?3 THEN -1
        ELSE min((finished - ?3) / ?5, ?6 - 1)
    END AS finished,
    count(*) AS events
FROM (
    SELECT
        created,
        published,
        dead_lettered,
        CASE
            WHEN published IS NULL AND dead_lettered IS NULL THEN NULL
            ELSE max(created, min(coalesce(published, dead_lettered),
                                  coalesce(dead_lettered, published)))
        END AS finished
    FROM (
        SELECT
            unixepoch(substr(o.created_at, 1, 19)) * 1000000
                + CAST(substr(o.created_at, 21, 6) AS INTEGER) AS created,
            unixepoch(substr(o.published_at, 1, 19)) * 1000000
                + CAST(substr(o.published_at, 21, 6) AS INTEGER) AS published,
            unixepoch(substr(o.dead_lettered_at, 1, 19)) * 1000000
                + CAST(substr(o.dead_lettered_at, 21, 6) AS INTEGER) AS dead_lettered
        FROM {table} AS o
        WHERE o.created_at < ?2
          AND (
              o.created_at >= ?1
              OR o.published_at >= ?1
              OR o.dead_lettered_at >= ?1
              OR (o.published_at IS NULL AND o.dead_lettered_at IS NULL)
          )
        LIMIT -1
    )
    LIMIT -1
)
GROUP BY 1, 2, 3, 4
