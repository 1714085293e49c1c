-- Removes the context headers. {table} the context table.
DELETE FROM {table}
