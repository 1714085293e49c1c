-- The record of applied schema migrations: one row per version applied to a table of this
-- database (outbox and inbox tables alike, each table its own stream of versions). hare-outbox
-- only adds rows; a row edited by hand makes migrate refuse to run (see the core's migration
-- module). applied_at is UTC text in the backend's fixed format.
CREATE TABLE IF NOT EXISTS {migrations} (
    table_name TEXT NOT NULL,
    version INTEGER NOT NULL,
    name TEXT NOT NULL,
    checksum TEXT NOT NULL,
    applied_at TEXT NOT NULL,
    PRIMARY KEY (table_name, version)
);
