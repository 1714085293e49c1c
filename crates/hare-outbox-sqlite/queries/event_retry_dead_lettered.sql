-- Return dead-lettered events to the queue: attempts back to 0, dead_lettered_at,
-- next_attempt_at and the lease cleared; last_error is kept for the record.
-- ?1 ids (JSON array of hyphenated UUID text; NULL = any), ?2..?6 the topic filter: every topic?
-- (0/1), included names, included prefixes, excluded names, excluded prefixes (JSON arrays).
UPDATE {table} AS o
SET dead_lettered_at = NULL,
    attempts = 0,
    next_attempt_at = NULL,
    lease_until = NULL,
    leased_by = NULL
WHERE o.dead_lettered_at IS NOT NULL
  AND o.published_at IS NULL
  AND (?1 IS NULL OR o.id IN (SELECT value FROM json_each(?1)))
  AND (
      ?2
      OR o.topic IN (SELECT value FROM json_each(?3))
      OR EXISTS (
          SELECT 1 FROM json_each(?4) AS p
          WHERE substr(o.topic, 1, length(p.value)) = p.value
      )
  )
  AND NOT (
      o.topic IN (SELECT value FROM json_each(?5))
      OR EXISTS (
          SELECT 1 FROM json_each(?6) AS p
          WHERE substr(o.topic, 1, length(p.value)) = p.value
      )
  )
