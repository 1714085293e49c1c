-- One batch of records processed before ?, oldest first, at most ? of them.
DELETE FROM {table} WHERE processed_at < ? ORDER BY processed_at LIMIT ?
