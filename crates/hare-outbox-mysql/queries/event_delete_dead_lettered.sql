-- One batch, oldest first: dead-lettered before ?, the five parameters of {topic_filter:o},
-- then the limit (READ COMMITTED, as event_delete_published.sql).
DELETE FROM {table}
WHERE dead_lettered_at < ? AND published_at IS NULL AND {topic_filter:o}
ORDER BY dead_lettered_at
LIMIT ?
