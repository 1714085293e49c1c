-- The events of one ordering key just before and just after an event (the event page's links).
-- Bound in this order: the sequence, the key (undelivered before), the sequence, the sequence,
-- the window, the key (any before), then the same six for after.
-- Undelivered events of the key are found however far away with one probe of the pending-key
-- index; delivered ones only within the window, through the primary key, so the statement reads
-- at most 2 × window rows. Of the two candidates on a side, the nearer one wins.
SELECT
    GREATEST(
        COALESCE((SELECT p.sequence FROM {table} AS p FORCE INDEX ({pending_key_idx})
                  WHERE p.undelivered = 1 AND p.ordering_key = ? AND p.sequence < ?
                  ORDER BY p.undelivered DESC, p.ordering_key DESC, p.sequence DESC
                  LIMIT 1), -1),
        COALESCE((SELECT MAX(w.sequence) FROM {table} AS w
                  WHERE w.sequence < ? AND w.sequence >= ? - ? AND w.ordering_key = ?), -1)
    ) AS previous,
    LEAST(
        COALESCE((SELECT n.sequence FROM {table} AS n FORCE INDEX ({pending_key_idx})
                  WHERE n.undelivered = 1 AND n.ordering_key = ? AND n.sequence > ?
                  ORDER BY n.undelivered, n.ordering_key, n.sequence
                  LIMIT 1), 9223372036854775807),
        COALESCE((SELECT MIN(w.sequence) FROM {table} AS w
                  WHERE w.sequence > ? AND w.sequence <= ? + ? AND w.ordering_key = ?),
                 9223372036854775807)
    ) AS next
