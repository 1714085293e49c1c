-- Adds one missing extra column to an existing outbox table (run by migrate after checking
-- table_columns.sql): its name and type, then CHECK (it IS NOT NULL) for a NOT NULL column
-- (SQLite refuses NOT NULL without a default in ADD COLUMN; the CHECK is tested against the rows
-- already stored, so it fails on a non-empty table as PostgreSQL's NOT NULL does), then
-- REFERENCES … ON DELETE CASCADE for a foreign key.
ALTER TABLE {table} ADD COLUMN {column_def}
