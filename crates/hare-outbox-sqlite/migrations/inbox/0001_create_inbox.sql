-- Inbox version 1 (SQLite): the inbox table (one row per event a consumer processed) and its
-- index. Idempotent (IF NOT EXISTS). A released migration is never edited; a change is a new file.
CREATE TABLE IF NOT EXISTS {table} (
    consumer     TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    processed_at TEXT NOT NULL,
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS {index} ON "{name}" (processed_at);
