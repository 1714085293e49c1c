-- The delivery latencies a journal timeline needs: for each bucket, only the ranks
-- its percentiles read (SQLite has no percentile function), so at most six rows per bucket
-- come back however many events were published.
-- ?1 since, ?2 until (timestamp text), ?3 since (microseconds since the Unix epoch), ?4 the
-- bucket width (microseconds), ?5 the number of buckets.
-- Returns bucket, rank (0-based, by latency), n (published in the bucket), latency_us
-- (published_at - created_at in microseconds): the ranks around 50 % and 95 % of n - 1 and the
-- largest. The backend interpolates between neighbouring ranks, as PostgreSQL's
-- percentile_cont does.
WITH latencies AS (
    SELECT
        min(
            (unixepoch(substr(o.published_at, 1, 19)) * 1000000
                + CAST(substr(o.published_at, 21, 6) AS INTEGER) - ?3) / ?4,
            ?5 - 1
        ) AS bucket,
        (unixepoch(substr(o.published_at, 1, 19)) * 1000000
            + CAST(substr(o.published_at, 21, 6) AS INTEGER))
        - (unixepoch(substr(o.created_at, 1, 19)) * 1000000
            + CAST(substr(o.created_at, 21, 6) AS INTEGER)) AS latency_us
    FROM {table} AS o
    WHERE o.published_at >= ?1
      AND o.published_at < ?2
),
ranked AS (
    SELECT
        bucket,
        latency_us,
        row_number() OVER (PARTITION BY bucket ORDER BY latency_us) - 1 AS rank,
        count(*) OVER (PARTITION BY bucket) AS n
    FROM latencies
)
SELECT bucket, rank, n, latency_us
FROM ranked
WHERE rank IN (
    CAST((n - 1) * 0.5 AS INTEGER),
    CAST((n - 1) * 0.5 AS INTEGER) + 1,
    CAST((n - 1) * 0.95 AS INTEGER),
    CAST((n - 1) * 0.95 AS INTEGER) + 1,
    n - 1
)
ORDER BY bucket, rank
