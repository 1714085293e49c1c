-- The versions applied to one table, oldest first. ? the table's name (without database).
SELECT version, name, checksum, applied_at
FROM {migrations}
WHERE table_name = ?
ORDER BY version
