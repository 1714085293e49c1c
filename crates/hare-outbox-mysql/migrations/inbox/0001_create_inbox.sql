-- Inbox version 1 (MySQL, MariaDB): the inbox table (one row per event a consumer processed)
-- with its index, in one idempotent statement. A released migration is never edited; a change
-- is a new file.
CREATE TABLE IF NOT EXISTS {table} (
    consumer     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    event_id     BINARY(16) NOT NULL,
    processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (consumer, event_id),
    KEY {index} (processed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
