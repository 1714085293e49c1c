-- One batch of the clean-up, oldest first: events published before ?1.
-- ?1 cut-off, ?2 limit, ?3..?7 the topic filter: every topic? (0/1), included names, included
-- prefixes, excluded names, excluded prefixes (JSON arrays). One short statement per batch: the
-- write lock is held only while it runs, so writers wait at most that long.
DELETE FROM {table}
WHERE sequence IN (
    SELECT o.sequence
    FROM {table} AS o
    WHERE o.published_at < ?1
      AND (
          ?3
          OR o.topic IN (SELECT value FROM json_each(?4))
          OR EXISTS (
              SELECT 1 FROM json_each(?5) AS p
              WHERE substr(o.topic, 1, length(p.value)) = p.value
          )
      )
      AND NOT (
          o.topic IN (SELECT value FROM json_each(?6))
          OR EXISTS (
              SELECT 1 FROM json_each(?7) AS p
              WHERE substr(o.topic, 1, length(p.value)) = p.value
          )
      )
    ORDER BY o.published_at
    LIMIT ?2
)
