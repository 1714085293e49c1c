-- $1..$5 the topic filter.
SELECT count(*) FILTER (WHERE o.dead_lettered_at IS NULL) AS pending,
       min(o.created_at) FILTER (WHERE o.dead_lettered_at IS NULL) AS oldest_pending,
       count(*) FILTER (WHERE o.dead_lettered_at IS NOT NULL) AS dead_lettered
FROM {table} o
WHERE o.published_at IS NULL
  AND ($1::boolean OR o.topic = ANY($2::text[])
           OR EXISTS (SELECT 1 FROM unnest($3::text[]) AS p(prefix) WHERE starts_with(o.topic, p.prefix)))
      AND NOT (o.topic = ANY($4::text[])
           OR EXISTS (SELECT 1 FROM unnest($5::text[]) AS p(prefix) WHERE starts_with(o.topic, p.prefix)))
