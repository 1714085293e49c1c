-- One page of the journal: newest first below the cursor, or oldest first above it (the backend
-- fills in {keyset} and {order}): keyset pagination on the primary key, so every page costs the
-- same however deep it is. Every filter value is a parameter; a NULL one matches everything.
-- Bound in this order: the cursor's sequence; the five of the topic filter; every status?, then
-- published, dead, leased, retrying, pending (0/1: the status as OutboxEvent::status judges it,
-- at the database's clock); the object's name twice (compared with {object_name}); the pk's
-- text twice (a string pk compares as text), the pk as JSON three times (any other pk compares
-- as JSON, whatever its key order; NULL when the filter's text is not JSON); the author, the
-- JSON path of the author header twice, the author again; created at or after (twice), created
-- before (twice); the page size.
SELECT {columns}
FROM {table} AS o
WHERE o.sequence {keyset} ?
  AND {topic_filter:o}
  AND (? OR CASE
          WHEN o.published_at IS NOT NULL THEN ?
          WHEN o.dead_lettered_at IS NOT NULL THEN ?
          WHEN o.lease_until > UTC_TIMESTAMP(6) THEN ?
          WHEN o.attempts > 0 THEN ?
          ELSE ?
      END)
  AND (? IS NULL OR (({object_name}) COLLATE utf8mb4_bin = ?
      AND (? IS NULL OR CASE JSON_TYPE(JSON_EXTRACT(o.payload, '$.pk'))
              WHEN 'STRING' THEN JSON_UNQUOTE(JSON_EXTRACT(o.payload, '$.pk')) COLLATE utf8mb4_bin = ?
              WHEN 'NULL' THEN FALSE
              ELSE COALESCE(JSON_VALID(?) AND JSON_CONTAINS(JSON_EXTRACT(o.payload, '$.pk'), ?)
                            AND JSON_CONTAINS(?, JSON_EXTRACT(o.payload, '$.pk')), FALSE)
          END)))
  AND (? IS NULL OR (JSON_TYPE(JSON_EXTRACT(o.headers, ?)) = 'STRING'
      AND JSON_UNQUOTE(JSON_EXTRACT(o.headers, ?)) COLLATE utf8mb4_bin = ?))
  AND (? IS NULL OR o.created_at >= ?)
  AND (? IS NULL OR o.created_at < ?)
ORDER BY o.sequence {order}
LIMIT ?
