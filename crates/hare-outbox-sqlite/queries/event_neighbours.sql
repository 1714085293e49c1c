-- The events of one ordering key just before and just after an event (the event page's links).
-- ?1 the event's sequence, ?2 its ordering key, ?3 the window: how many sequences on either side
-- are searched among every event.
-- Undelivered events of the key are found however far away, with one probe of the pending-key
-- index; delivered ones only within the window, through the rowid (there is no index on the key
-- of delivered events, which would cost every enqueue), so the statement reads at most 2 × ?3
-- rows. Of the two candidates on a side, the nearer one wins (the aggregates skip a NULL).
SELECT
    (SELECT max(c.s) FROM (
        SELECT (SELECT p.sequence FROM {table} AS p INDEXED BY {pending_key_idx}
                WHERE p.ordering_key = ?2 AND p.published_at IS NULL AND p.sequence < ?1
                ORDER BY p.ordering_key DESC, p.sequence DESC
                LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT max(w.sequence) FROM {table} AS w
                WHERE w.sequence < ?1 AND w.sequence >= ?1 - ?3 AND w.ordering_key = ?2)
    ) AS c) AS previous,
    (SELECT min(c.s) FROM (
        SELECT (SELECT n.sequence FROM {table} AS n INDEXED BY {pending_key_idx}
                WHERE n.ordering_key = ?2 AND n.published_at IS NULL AND n.sequence > ?1
                ORDER BY n.ordering_key, n.sequence
                LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT min(w.sequence) FROM {table} AS w
                WHERE w.sequence > ?1 AND w.sequence <= ?1 + ?3 AND w.ordering_key = ?2)
    ) AS c) AS next
