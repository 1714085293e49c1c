-- The counts of a journal timeline: per bucket, events created, published and
-- dead-lettered in it, and the events leaving the backlog in it.
-- $1 the bucket edges: since, the start of every later bucket, then until (ascending), $2 since,
-- $3 until. width_bucket finds a time's bucket by binary search over the edges: 0 before since
-- (returned as bucket -1: it only feeds the backlog at the first bucket's end), k + 1 for
-- bucket k; an event on an edge lands in the later bucket.
-- An event is in the backlog at time T when created before T and neither published nor
-- dead-lettered before T; it leaves at the later of its creation and its first finish.
-- Rows outside every bucket and never in the backlog during the window are skipped: created at
-- or after $3, or finished before $2. One pass over the rows: each one yields its four moments.
SELECT
    (width_bucket(m.at, $1::timestamptz[]) - 1)::bigint AS bucket,
    count(*) FILTER (WHERE m.kind = 1) AS created,
    count(*) FILTER (WHERE m.kind = 2) AS published,
    count(*) FILTER (WHERE m.kind = 3) AS dead_lettered,
    count(*) FILTER (WHERE m.kind = 4) AS finished
FROM {table} o
CROSS JOIN LATERAL (
    VALUES
        (1, o.created_at),
        (2, o.published_at),
        (3, o.dead_lettered_at),
        (4, CASE
                WHEN o.published_at IS NOT NULL OR o.dead_lettered_at IS NOT NULL
                THEN greatest(o.created_at, least(o.published_at, o.dead_lettered_at))
            END)
) AS m(kind, at)
WHERE o.created_at < $3
  AND (o.created_at >= $2
       OR o.published_at >= $2
       OR o.dead_lettered_at >= $2
       OR (o.published_at IS NULL AND o.dead_lettered_at IS NULL))
  AND m.at < $3
GROUP BY 1
ORDER BY 1
