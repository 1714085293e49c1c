-- The queue's state. ?1..?5 the topic filter: every topic? (0/1), included names, included
-- prefixes, excluded names, excluded prefixes (JSON arrays).
-- pending: neither published nor dead-lettered; oldest_pending: their earliest created_at (text
-- order is time order), NULL when none; dead_lettered: dead and never published.
SELECT
    count(*) FILTER (WHERE o.dead_lettered_at IS NULL) AS pending,
    min(o.created_at) FILTER (WHERE o.dead_lettered_at IS NULL) AS oldest_pending,
    count(*) FILTER (WHERE o.dead_lettered_at IS NOT NULL) AS dead_lettered
FROM {table} AS o
WHERE o.published_at IS NULL
  AND (
      ?1
      OR o.topic IN (SELECT value FROM json_each(?2))
      OR EXISTS (
          SELECT 1 FROM json_each(?3) AS p
          WHERE substr(o.topic, 1, length(p.value)) = p.value
      )
  )
  AND NOT (
      o.topic IN (SELECT value FROM json_each(?4))
      OR EXISTS (
          SELECT 1 FROM json_each(?5) AS p
          WHERE substr(o.topic, 1, length(p.value)) = p.value
      )
  )
