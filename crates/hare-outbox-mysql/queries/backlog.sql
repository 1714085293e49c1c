-- The backlog of the topics of {topic_filter:o} (five parameters).
SELECT CAST(COALESCE(SUM(o.dead_lettered_at IS NULL), 0) AS SIGNED) AS pending,
       MIN(CASE WHEN o.dead_lettered_at IS NULL THEN o.created_at END) AS oldest_pending,
       CAST(COALESCE(SUM(o.dead_lettered_at IS NOT NULL), 0) AS SIGNED) AS dead_lettered
FROM {table} AS o FORCE INDEX ({pending_key_idx})
WHERE o.undelivered = 1 AND {topic_filter:o}
