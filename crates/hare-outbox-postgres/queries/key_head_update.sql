-- Retry ($3 = 'retry') or release ($3 = 'release') the head of a held key.
-- $1 the head's sequence, $2 its ordering key, $4 the clock a live lease is judged by, $5 the
-- header that keeps a released event's key.
-- Only while the event is still the key's held head: undelivered, dead-lettered or failed, no
-- earlier undelivered event of the key, and no live lease (a relay delivering it right now).
-- Retry: a dead letter returns to the queue with its attempts reset to 0; a failing head is due
-- at once, its attempts kept. Release: the event leaves its key (ordering_key NULL, the key kept
-- in the header $5), keeping its state, so the key's next events flow.
UPDATE {table} o
SET attempts = CASE WHEN $3 = 'retry' AND o.dead_lettered_at IS NOT NULL THEN 0 ELSE o.attempts END,
    dead_lettered_at = CASE WHEN $3 = 'retry' THEN NULL ELSE o.dead_lettered_at END,
    next_attempt_at = CASE WHEN $3 = 'retry' THEN NULL ELSE o.next_attempt_at END,
    lease_until = CASE WHEN $3 = 'retry' THEN NULL ELSE o.lease_until END,
    leased_by = CASE WHEN $3 = 'retry' THEN NULL ELSE o.leased_by END,
    ordering_key = CASE WHEN $3 = 'release' THEN NULL ELSE o.ordering_key END,
    headers = CASE WHEN $3 = 'release'
                   THEN o.headers || jsonb_build_object($5::text, o.ordering_key)
                   ELSE o.headers END
WHERE o.sequence = $1
  AND o.ordering_key = $2
  AND o.published_at IS NULL
  AND (o.dead_lettered_at IS NOT NULL OR o.attempts > 0)
  AND (o.lease_until IS NULL OR o.lease_until <= $4)
  AND NOT EXISTS (
      SELECT 1 FROM {table} p
      WHERE p.ordering_key = $2 AND p.published_at IS NULL AND p.sequence < $1)
