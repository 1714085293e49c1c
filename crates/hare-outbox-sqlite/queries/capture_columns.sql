-- The columns of a table in order, with their declared type and primary-key position.
-- ?1 the table, ?2 the database.
SELECT name, type, pk FROM pragma_table_info(?1, ?2) ORDER BY cid
