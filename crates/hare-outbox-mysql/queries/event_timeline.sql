-- The counts of a journal timeline, one row per combination of the buckets an event was
-- created, published, dead-lettered and finished in, with how many events share it; the backend
-- adds them up per bucket. Bound: since, until (times), since, until (microseconds since the
-- Unix epoch), the bucket width (microseconds), the number of buckets.
-- A bucket is -1 before the window (it only feeds the backlog at the first bucket's end) and
-- NULL for no time or a time at or after its end. An event is in the backlog at time T when
-- created before T and neither published nor dead-lettered before T; it leaves ("finished") at
-- the later of its creation and its first finish. Rows outside every bucket and never in the
-- backlog during the window are skipped.
SELECT
    CAST(CASE WHEN x.created < x.s THEN -1 ELSE LEAST((x.created - x.s) DIV x.w, x.n - 1) END AS SIGNED) AS created,
    CAST(CASE
        WHEN x.published IS NULL OR x.published >= x.u THEN NULL
        WHEN x.published < x.s THEN -1
        ELSE LEAST((x.published - x.s) DIV x.w, x.n - 1)
    END AS SIGNED) AS published,
    CAST(CASE
        WHEN x.dead_lettered IS NULL OR x.dead_lettered >= x.u THEN NULL
        WHEN x.dead_lettered < x.s THEN -1
        ELSE LEAST((x.dead_lettered - x.s) DIV x.w, x.n - 1)
    END AS SIGNED) AS dead_lettered,
    CAST(CASE
        WHEN x.finished IS NULL OR x.finished >= x.u THEN NULL
        WHEN x.finished < x.s THEN -1
        ELSE LEAST((x.finished - x.s) DIV x.w, x.n - 1)
    END AS SIGNED) AS finished,
    CAST(COUNT(*) AS SIGNED) AS events
FROM (
    SELECT y.*,
           CASE WHEN y.published IS NULL AND y.dead_lettered IS NULL THEN NULL
                ELSE GREATEST(y.created, LEAST(COALESCE(y.published, y.dead_lettered),
                                               COALESCE(y.dead_lettered, y.published)))
           END AS finished
    FROM (
        SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', o.created_at) AS created,
               TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', o.published_at) AS published,
               TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', o.dead_lettered_at) AS dead_lettered,
               g.s, g.u, g.w, g.n
        FROM (SELECT CAST(? AS DATETIME(6)) AS since_t, CAST(? AS DATETIME(6)) AS until_t,
                     ? AS s, ? AS u, ? AS w, ? AS n) AS g
        JOIN {table} AS o
          ON o.created_at < g.until_t
         AND (o.created_at >= g.since_t
              OR o.published_at >= g.since_t
              OR o.dead_lettered_at >= g.since_t
              OR (o.published_at IS NULL AND o.dead_lettered_at IS NULL))
    ) AS y
) AS x
GROUP BY 1, 2, 3, 4
