-- The record of applied schema migrations: one row per version applied to a table of this schema
-- (outbox and inbox tables alike, each table its own stream of versions). hare-outbox only adds
-- rows; a row edited by hand makes migrate refuse to run (see the core's migration module).
CREATE TABLE IF NOT EXISTS {migrations} (
    table_name VARCHAR(255) NOT NULL,
    version    BIGINT NOT NULL,
    name       VARCHAR(255) NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, version)
);
