-- The capture triggers of one database with their text (which holds the install record).
-- {schema} the quoted database name.
SELECT name, tbl_name, sql
FROM {schema}.sqlite_master
WHERE type = 'trigger' AND name LIKE 'hare\_capture\_%' ESCAPE '\'
ORDER BY name
