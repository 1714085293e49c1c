-- Counts per topic and state, one page of topics in name order.
-- ?1 topics after this one ('' = from the first), ?2 the page size, ?3 published events count
-- from this time on, ?4 the clock a live lease is judged by (timestamp text: text order is time
-- order).
-- Reads the undelivered and dead-lettered rows (the pending-key index holds exactly them) and
-- the rows published since ?3 (the published index), never the whole history of published
-- events. States as OutboxEvent::status judges them: dead, then leased (a live lease), then
-- retrying (failed before), else pending.
WITH open AS (
    SELECT o.topic,
           count(*) FILTER (WHERE o.dead_lettered_at IS NULL AND NOT coalesce(o.lease_until > ?4, 0)
                              AND o.attempts = 0) AS pending,
           count(*) FILTER (WHERE o.dead_lettered_at IS NULL AND o.lease_until > ?4) AS leased,
           count(*) FILTER (WHERE o.dead_lettered_at IS NULL AND NOT coalesce(o.lease_until > ?4, 0)
                              AND o.attempts > 0) AS retrying,
           count(*) FILTER (WHERE o.dead_lettered_at IS NOT NULL) AS dead,
           min(o.created_at) FILTER (WHERE o.dead_lettered_at IS NULL) AS oldest_pending_at
    FROM {table} AS o INDEXED BY {pending_key_idx}
    WHERE o.published_at IS NULL AND o.topic > ?1
    GROUP BY o.topic
),
published AS (
    SELECT o.topic, count(*) AS published
    FROM {table} AS o INDEXED BY {published_idx}
    WHERE o.published_at >= ?3 AND o.topic > ?1
    GROUP BY o.topic
),
topics AS (
    SELECT topic FROM open UNION SELECT topic FROM published
)
SELECT t.topic,
       coalesce(c.pending, 0) AS pending,
       coalesce(c.leased, 0) AS leased,
       coalesce(c.retrying, 0) AS retrying,
       coalesce(c.dead, 0) AS dead,
       coalesce(p.published, 0) AS published,
       c.oldest_pending_at
FROM topics AS t
LEFT JOIN open AS c ON c.topic = t.topic
LEFT JOIN published AS p ON p.topic = t.topic
ORDER BY t.topic
LIMIT ?2
