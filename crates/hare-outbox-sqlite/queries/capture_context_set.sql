-- Stores the transaction's context headers. ?1 the headers' JSON text. {table} the context table.
INSERT INTO {table} (id, headers) VALUES (1, ?1)
ON CONFLICT (id) DO UPDATE SET headers = excluded.headers
