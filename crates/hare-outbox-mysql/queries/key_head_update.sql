-- Retry ({action} = 'retry') or release ({action} = 'release') the head of a held key, run after
-- key_head_earlier.sql found no earlier undelivered event of the key, in the same transaction.
-- Bound: the JSON path of the header that keeps a released event's key, the head's sequence, its
-- ordering key, the clock a live lease is judged by.
-- Only while the event is still a held head: undelivered, dead-lettered or failed, and no live
-- lease (a relay delivering it right now). A single-table UPDATE evaluates its assignments left
-- to right, each seeing the columns already set: the released key is copied into the headers
-- first, and attempts is reset before dead_lettered_at is cleared.
UPDATE {table}
SET headers = CASE WHEN '{action}' = 'release'
                   THEN JSON_SET(headers, ?, ordering_key) ELSE headers END,
    attempts = CASE WHEN '{action}' = 'retry' AND dead_lettered_at IS NOT NULL
                    THEN 0 ELSE attempts END,
    dead_lettered_at = CASE WHEN '{action}' = 'retry' THEN NULL ELSE dead_lettered_at END,
    next_attempt_at = CASE WHEN '{action}' = 'retry' THEN NULL ELSE next_attempt_at END,
    lease_until = CASE WHEN '{action}' = 'retry' THEN NULL ELSE lease_until END,
    leased_by = CASE WHEN '{action}' = 'retry' THEN NULL ELSE leased_by END,
    ordering_key = CASE WHEN '{action}' = 'release' THEN NULL ELSE ordering_key END
WHERE sequence = ?
  AND ordering_key = ?
  AND published_at IS NULL
  AND (dead_lettered_at IS NOT NULL OR attempts > 0)
  AND (lease_until IS NULL OR lease_until <= ?)
