DELETE FROM {table}
WHERE rowid IN (SELECT rowid FROM {table} WHERE processed_at < ?1 ORDER BY processed_at LIMIT ?2)
