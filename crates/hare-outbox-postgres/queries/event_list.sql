-- One page of the journal: newest first below the cursor, or oldest first above it
-- (the backend fills in the comparison and the direction): keyset pagination on the primary
-- key, so every page costs the same however deep it is. Every filter value is a parameter; a
-- NULL one (or $6 = true for the statuses) matches everything.
-- $1..$5 the topic filter: every topic?, included names, included prefixes, excluded names,
-- excluded prefixes (prefixes match literally with starts_with, never LIKE).
-- $6 every status?, then whether to show $7 pending, $8 leased, $9 retrying, $10 dead,
-- $11 published: the status as OutboxEvent::status judges it, at the database's clock.
-- $12 the object's name (a JSON string), compared with {object_name}: the payload's "table"
-- when it is a string, else its "model" (the journal's default), or its "model" alone (the
-- object column configured to the capture's label); $13 the payload's "pk" as text, which a
-- string pk equals, and $14 the same text read as JSON, NULL when it is not JSON or is a JSON string,
-- which any other pk equals (so `22` finds 22, and a composite key matches whatever its key
-- order and spacing). $15 the author header's name, $16 its value (a JSON string, exactly).
-- Each filter is one jsonb equality: the planner's estimate for it stays that of one equality,
-- so it keeps walking the primary key backwards instead of sorting the whole table.
-- $17 created at or after, $18 created before, $19 the cursor's sequence, $20 the page size.
SELECT {columns}
FROM {table} o
WHERE o.sequence {keyset} $19
  AND ($1::boolean OR o.topic = ANY($2::text[])
       OR EXISTS (SELECT 1 FROM unnest($3::text[]) AS p(prefix) WHERE starts_with(o.topic, p.prefix)))
  AND NOT (o.topic = ANY($4::text[])
       OR EXISTS (SELECT 1 FROM unnest($5::text[]) AS p(prefix) WHERE starts_with(o.topic, p.prefix)))
  AND ($6::boolean OR CASE
          WHEN o.published_at IS NOT NULL THEN $11::boolean
          WHEN o.dead_lettered_at IS NOT NULL THEN $10::boolean
          WHEN o.lease_until > now() THEN $8::boolean
          WHEN o.attempts > 0 THEN $9::boolean
          ELSE $7::boolean
      END)
  AND ($12::text IS NULL
       OR ({object_name} = to_jsonb($12::text)
           AND ($13::text IS NULL
                OR o.payload -> 'pk' = to_jsonb($13::text)
                OR o.payload -> 'pk' = $14::jsonb)))
  AND ($16::text IS NULL OR o.headers -> $15::text = to_jsonb($16::text))
  AND ($17::timestamptz IS NULL OR o.created_at >= $17::timestamptz)
  AND ($18::timestamptz IS NULL OR o.created_at < $18::timestamptz)
ORDER BY o.sequence {order}
LIMIT $20
