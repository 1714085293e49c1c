INSERT INTO {table} (consumer, event_id, processed_at) VALUES (?1, ?2, ?3)
ON CONFLICT (consumer, event_id) DO NOTHING
RETURNING 1
