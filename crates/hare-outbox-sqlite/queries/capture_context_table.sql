-- The table capture triggers read the transaction's context headers from; one row at most.
-- {table} the schema-qualified context table.
CREATE TABLE IF NOT EXISTS {table} (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    headers TEXT NOT NULL
)
