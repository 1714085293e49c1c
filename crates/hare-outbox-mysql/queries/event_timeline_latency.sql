-- The delivery latencies a journal timeline needs: for each bucket, only the ranks its
-- percentiles read, so a few rows per bucket come back however many events were published.
-- Bound: since, until (times), since (microseconds since the Unix epoch), the bucket width
-- (microseconds), the number of buckets. Returns bucket, rnk (0-based, by latency), n
-- (published in the bucket), latency_us; the backend interpolates between neighbouring ranks,
-- as PostgreSQL's percentile_cont does.
SELECT r.bucket, r.rnk, r.n, r.latency_us
FROM (
    SELECT l.bucket, l.latency_us,
           CAST(ROW_NUMBER() OVER (PARTITION BY l.bucket ORDER BY l.latency_us) AS SIGNED) - 1 AS rnk,
           CAST(COUNT(*) OVER (PARTITION BY l.bucket) AS SIGNED) AS n
    FROM (
        SELECT CAST(LEAST((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', o.published_at) - g.s) DIV g.w,
                          g.n - 1) AS SIGNED) AS bucket,
               CAST(TIMESTAMPDIFF(MICROSECOND, o.created_at, o.published_at) AS SIGNED) AS latency_us
        FROM (SELECT CAST(? AS DATETIME(6)) AS since_t, CAST(? AS DATETIME(6)) AS until_t,
                     ? AS s, ? AS w, ? AS n) AS g
        JOIN {table} AS o FORCE INDEX ({published_idx})
          ON o.published_at >= g.since_t AND o.published_at < g.until_t
    ) AS l
) AS r
WHERE r.rnk IN (FLOOR((r.n - 1) * 0.5) - 1, FLOOR((r.n - 1) * 0.5), FLOOR((r.n - 1) * 0.5) + 1,
                FLOOR((r.n - 1) * 0.95) - 1, FLOOR((r.n - 1) * 0.95), FLOOR((r.n - 1) * 0.95) + 1,
                r.n - 1)
ORDER BY r.bucket, r.rnk
