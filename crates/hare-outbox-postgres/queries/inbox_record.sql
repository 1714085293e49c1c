-- A concurrent transaction inserting the same pair waits for this one (unique index).
INSERT INTO {table} (consumer, event_id) VALUES ($1, $2)
ON CONFLICT (consumer, event_id) DO NOTHING
RETURNING true
