CREATE TABLE IF NOT EXISTS {table} (
    consumer     VARCHAR(255) NOT NULL,
    event_id     UUID NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS "{prefix}_processed_idx" ON {table} (processed_at);
