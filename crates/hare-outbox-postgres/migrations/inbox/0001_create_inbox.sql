-- Inbox version 1: the inbox table (one row per event a consumer processed) and its index.
-- Idempotent (IF NOT EXISTS). A released migration is never edited; a change is a new file.
CREATE TABLE IF NOT EXISTS {table} (
    consumer     VARCHAR(255) NOT NULL,
    event_id     UUID NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS "{prefix}_processed_idx" ON {table} (processed_at);
