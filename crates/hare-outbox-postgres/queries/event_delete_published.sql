-- One batch: $1 published before, $2 limit, $3..$7 the topic filter. SKIP LOCKED and a short
-- statement keep concurrent writers and relays from waiting on it.
DELETE FROM {table}
WHERE sequence IN (
    SELECT o.sequence FROM {table} o
    WHERE o.published_at < $1
      AND ($3::boolean OR o.topic = ANY($4::text[])
           OR EXISTS (SELECT 1 FROM unnest($5::text[]) AS p(prefix) WHERE starts_with(o.topic, p.prefix)))
      AND NOT (o.topic = ANY($6::text[])
           OR EXISTS (SELECT 1 FROM unnest($7::text[]) AS p(prefix) WHERE starts_with(o.topic, p.prefix)))
    ORDER BY o.published_at
    LIMIT $2
    FOR UPDATE OF o SKIP LOCKED)
