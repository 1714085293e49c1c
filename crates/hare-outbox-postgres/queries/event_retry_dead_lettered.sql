-- $1 ids (NULL = any), $2..$6 the topic filter.
UPDATE {table} o
SET dead_lettered_at = NULL, attempts = 0, next_attempt_at = NULL, lease_until = NULL, leased_by = NULL
WHERE o.dead_lettered_at IS NOT NULL
  AND o.published_at IS NULL
  AND ($1::uuid[] IS NULL OR o.id = ANY($1::uuid[]))
  AND ($2::boolean OR o.topic = ANY($3::text[])
           OR EXISTS (SELECT 1 FROM unnest($4::text[]) AS p(prefix) WHERE starts_with(o.topic, p.prefix)))
      AND NOT (o.topic = ANY($5::text[])
           OR EXISTS (SELECT 1 FROM unnest($6::text[]) AS p(prefix) WHERE starts_with(o.topic, p.prefix)))
