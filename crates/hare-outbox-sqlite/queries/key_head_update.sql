-- Retry (?3 = 'retry') or release (?3 = 'release') the head of a held key.
-- ?1 the head's sequence, ?2 its ordering key, ?4 the clock a live lease is judged by (timestamp
-- text), ?5 the JSON path of the header that keeps a released event's key.
-- Only while the event is still the key's held head: undelivered, dead-lettered or failed, no
-- earlier undelivered event of the key, and no live lease (a relay delivering it right now).
-- Retry: a dead letter returns to the queue with its attempts reset to 0; a failing head is due
-- at once, its attempts kept. Release: the event leaves its key (ordering_key NULL, the key kept
-- in the header), keeping its state, so the key's next events flow. Every right-hand side reads
-- the row as it was before the update.
UPDATE {table}
SET attempts = CASE WHEN ?3 = 'retry' AND dead_lettered_at IS NOT NULL THEN 0 ELSE attempts END,
    dead_lettered_at = CASE WHEN ?3 = 'retry' THEN NULL ELSE dead_lettered_at END,
    next_attempt_at = CASE WHEN ?3 = 'retry' THEN NULL ELSE next_attempt_at END,
    lease_until = CASE WHEN ?3 = 'retry' THEN NULL ELSE lease_until END,
    leased_by = CASE WHEN ?3 = 'retry' THEN NULL ELSE leased_by END,
    ordering_key = CASE WHEN ?3 = 'release' THEN NULL ELSE ordering_key END,
    headers = CASE WHEN ?3 = 'release' THEN json_set(headers, ?5, ordering_key) ELSE headers END
WHERE sequence = ?1
  AND ordering_key = ?2
  AND published_at IS NULL
  AND (dead_lettered_at IS NOT NULL OR attempts > 0)
  AND (lease_until IS NULL OR lease_until <= ?4)
  AND NOT EXISTS (
      SELECT 1 FROM {table} AS p INDEXED BY {pending_key_idx}
      WHERE p.ordering_key = ?2 AND p.published_at IS NULL AND p.sequence < ?1)
