-- One page of the journal: newest first below the cursor, or oldest first above it
-- (the backend fills in the comparison and the direction): keyset pagination on sequence (the
-- rowid), so every page costs the same however deep it is. Every filter value is a parameter;
-- a NULL one (or ?6 = 1 for the statuses) matches everything.
-- ?1..?5 the topic filter: every topic? (0/1), included names, included prefixes, excluded names,
-- excluded prefixes (JSON arrays of strings; prefixes match literally, never LIKE or GLOB).
-- ?6 every status? (0/1), then whether to show ?7 pending, ?8 leased, ?9 retrying, ?10 dead,
-- ?11 published (0/1): the status as OutboxEvent::status judges it, at the database's clock
-- (timestamps are text in one fixed format, so text order is time order).
-- ?12 the object's name (text), compared with {object_name}: the payload's "table" when it is a
-- string, else its "model" (the journal's default), or its "model" alone (the object column
-- configured to the capture's label). ?13 the payload's "pk" as text: a string as is, any other
-- JSON value as its compact JSON text with object keys sorted (`22`; a composite key as
-- serde_json writes it), which the backend also makes of the filter's text when it is JSON. ?14 the JSON path of the author header, ?15 its value.
-- ?16 created at or after, ?17 created before (timestamp text). ?18 the cursor's sequence,
-- ?19 the page size.
SELECT
    {columns}
FROM {table} AS o
WHERE o.sequence {keyset} ?18
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
  AND (
      ?6
      OR CASE
          WHEN o.published_at IS NOT NULL THEN ?11
          WHEN o.dead_lettered_at IS NOT NULL THEN ?10
          WHEN o.lease_until > strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z' THEN ?8
          WHEN o.attempts > 0 THEN ?9
          ELSE ?7
      END
  )
  AND (
      ?12 IS NULL
      OR (
          {object_name} = ?12
          AND (
              ?13 IS NULL
              OR CASE json_type(o.payload, '$.pk')
                  WHEN 'text' THEN o.payload ->> '$.pk'
                  WHEN 'null' THEN NULL
                  -- A composite key with its keys sorted, as serde_json writes it (capture
                  -- triggers write them in the primary key's column order).
                  WHEN 'object' THEN (
                      SELECT json_group_object(
                          k.key,
                          CASE k.type
                              WHEN 'true' THEN json('true')
                              WHEN 'false' THEN json('false')
                              WHEN 'null' THEN json('null')
                              WHEN 'object' THEN json(k.value)
                              WHEN 'array' THEN json(k.value)
                              ELSE k.value
                          END
                      )
                      FROM (
                          SELECT key, value, type
                          FROM json_each(o.payload, '$.pk')
                          ORDER BY key
                      ) AS k
                  )
                  ELSE o.payload -> '$.pk'
              END = ?13
          )
      )
  )
  AND (
      ?15 IS NULL
      OR (json_type(o.headers, ?14) = 'text' AND o.headers ->> ?14 = ?15)
  )
  AND (?16 IS NULL OR o.created_at >= ?16)
  AND (?17 IS NULL OR o.created_at < ?17)
ORDER BY o.sequence {order}
LIMIT ?19
