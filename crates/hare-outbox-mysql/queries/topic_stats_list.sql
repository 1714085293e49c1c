-- Counts per topic and state, one page of topics in name order.
-- Bound: the clock a live lease is judged by (three times), topics after ? (''= from the
-- first); published since ?, topics after ? again; the page size.
-- Reads the undelivered and dead-lettered rows (the pending-key index) and the rows published
-- since then (the published index), never the whole history. States as OutboxEvent::status
-- judges them: dead, then leased (a live lease), then retrying (failed before), else pending.
SELECT t.topic,
       CAST(COALESCE(SUM(t.pending), 0) AS SIGNED) AS pending,
       CAST(COALESCE(SUM(t.leased), 0) AS SIGNED) AS leased,
       CAST(COALESCE(SUM(t.retrying), 0) AS SIGNED) AS retrying,
       CAST(COALESCE(SUM(t.dead), 0) AS SIGNED) AS dead,
       CAST(COALESCE(SUM(t.published), 0) AS SIGNED) AS published,
       MIN(t.oldest) AS oldest_pending_at
FROM (
    SELECT o.topic,
           o.dead_lettered_at IS NULL AND NOT COALESCE(o.lease_until > ?, FALSE)
               AND o.attempts = 0 AS pending,
           o.dead_lettered_at IS NULL AND COALESCE(o.lease_until > ?, FALSE) AS leased,
           o.dead_lettered_at IS NULL AND NOT COALESCE(o.lease_until > ?, FALSE)
               AND o.attempts > 0 AS retrying,
           o.dead_lettered_at IS NOT NULL AS dead,
           0 AS published,
           CASE WHEN o.dead_lettered_at IS NULL THEN o.created_at END AS oldest
    FROM {table} AS o FORCE INDEX ({pending_key_idx})
    WHERE o.undelivered = 1 AND o.topic > ?
    UNION ALL
    SELECT o.topic, 0, 0, 0, 0, 1, NULL
    FROM {table} AS o FORCE INDEX ({published_idx})
    WHERE o.published_at >= ? AND o.topic > ?
) AS t
GROUP BY t.topic
ORDER BY t.topic
LIMIT ?
