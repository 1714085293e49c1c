-- One batch, oldest first: published before ?, the five parameters of {topic_filter:o}, then
-- the limit. Run in a READ COMMITTED transaction, so it takes no gap locks a writer would wait
-- for.
DELETE FROM {table}
WHERE published_at < ? AND {topic_filter:o}
ORDER BY published_at
LIMIT ?
