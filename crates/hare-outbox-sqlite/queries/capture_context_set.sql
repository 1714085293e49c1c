-- Stores the transaction's context. ?1 the headers' JSON text, ?2 the JSON text of the keys
-- merged into the envelope (NULL for none). {table} the context table.
INSERT INTO {table} (id, headers, payload) VALUES (1, ?1, ?2)
ON CONFLICT (id) DO UPDATE SET headers = excluded.headers, payload = excluded.payload
