-- The delivery latency of a journal timeline: per bucket with published events,
-- the median, 95th percentile (interpolated, percentile_cont) and largest of
-- published_at - created_at, in milliseconds.
-- $1 the bucket edges as in event_timeline.sql, $2 since, $3 until.
-- The aggregates order the intervals themselves (one shared sort, no per-row conversion); only
-- the three results per bucket become milliseconds.
SELECT
    l.bucket,
    extract(epoch FROM l.p50)::double precision * 1000 AS p50_ms,
    extract(epoch FROM l.p95)::double precision * 1000 AS p95_ms,
    extract(epoch FROM l.max)::double precision * 1000 AS max_ms
FROM (
    SELECT
        (width_bucket(o.published_at, $1::timestamptz[]) - 1)::bigint AS bucket,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY o.published_at - o.created_at) AS p50,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY o.published_at - o.created_at) AS p95,
        max(o.published_at - o.created_at) AS max
    FROM {table} o
    WHERE o.published_at >= $2
      AND o.published_at < $3
    GROUP BY 1
) AS l
ORDER BY l.bucket
