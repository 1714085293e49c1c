-- Returns dead letters to the queue: {ids} (`AND o.id IN (…)` when ids are given), then the
-- five parameters of {topic_filter:o}.
UPDATE {table} AS o
SET o.dead_lettered_at = NULL, o.attempts = 0, o.next_attempt_at = NULL, o.lease_until = NULL,
    o.leased_by = NULL
WHERE o.dead_lettered_at IS NOT NULL AND o.published_at IS NULL{ids}
  AND {topic_filter:o}
