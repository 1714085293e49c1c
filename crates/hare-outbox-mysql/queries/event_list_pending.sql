-- The pending events the connection sees (its own transaction's and committed ones), oldest
-- first. ? limit.
SELECT {columns} FROM {table}
WHERE published_at IS NULL AND dead_lettered_at IS NULL
ORDER BY sequence
LIMIT ?
