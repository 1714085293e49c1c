-- The versions applied to one table, oldest first. $1 the table's name (without schema).
SELECT version, name, checksum, applied_at
FROM {migrations}
WHERE table_name = $1
ORDER BY version
