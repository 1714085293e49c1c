DELETE FROM {table}
WHERE (consumer, event_id) IN (
    SELECT consumer, event_id FROM {table}
    WHERE processed_at < $1
    ORDER BY processed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED)
