-- The columns of a table: ? its database (NULL: the connection's), ? its name.
SELECT CAST(column_name AS CHAR(64)) AS name FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?
