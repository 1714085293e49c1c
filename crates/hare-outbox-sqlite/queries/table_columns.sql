-- The columns an existing table has, for migrate to add the missing extra columns (SQLite has no
-- `ADD COLUMN IF NOT EXISTS`). ?1 the table, ?2 the database (`main` or the attached schema).
SELECT name FROM pragma_table_info(?1, ?2)
