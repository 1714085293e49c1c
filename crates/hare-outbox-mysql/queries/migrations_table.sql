-- The record of applied schema migrations: one row per version applied to a table of this
-- database (outbox and inbox tables alike, each table its own stream of versions). hare-outbox
-- only adds rows; a row edited by hand makes migrate refuse to run.
CREATE TABLE IF NOT EXISTS {migrations} (
    table_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    version    BIGINT NOT NULL,
    name       VARCHAR(255) NOT NULL,
    checksum   VARCHAR(255) NOT NULL,
    applied_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (table_name, version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
