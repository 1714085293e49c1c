-- The table capture triggers read the transaction's context from; one row at most: the
-- headers' JSON text, and the JSON text of the keys merged into the envelope (NULL for none).
-- {table} the schema-qualified context table. A table made before `payload` existed gets the
-- column from src/capture.rs.
CREATE TABLE IF NOT EXISTS {table} (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    headers TEXT NOT NULL,
    payload TEXT
)
