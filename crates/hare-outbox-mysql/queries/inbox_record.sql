-- A concurrent transaction inserting the same pair waits for this one (primary key); a taken
-- pair fails with ER_DUP_ENTRY, which `record` reads as "already processed".
INSERT INTO {table} (consumer, event_id) VALUES (?, ?)
