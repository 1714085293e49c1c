-- Outbox version 1 (MySQL ≥ 8.0, MariaDB ≥ 10.6): the outbox table with its indexes, in one
-- idempotent statement (CREATE TABLE IF NOT EXISTS; MySQL has no CREATE INDEX IF NOT EXISTS, so
-- the indexes are part of the table). A released migration is never edited: its checksum is
-- recorded; a change of schema is a new file.
-- Times are DATETIME(6) in UTC, written from UTC_TIMESTAMP(6) or bound as UTC. Ids are
-- BINARY(16) (UUID bytes; a v7 id sorts by time). Text that is compared or ordered (topic,
-- ordering and idempotency keys, the relay's name) uses utf8mb4_bin: byte order, the order Rust
-- strings sort in.
-- MySQL has no partial index: `pending` (neither published nor dead-lettered) and `undelivered`
-- (not published) are stored generated columns, each first in the index it selects, so the
-- relay's probes read only rows still to deliver.
CREATE TABLE IF NOT EXISTS {table} (
    sequence         BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    id               BINARY(16) NOT NULL,
    topic            VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    payload          JSON NOT NULL,
    headers          JSON NOT NULL,
    ordering_key     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    idempotency_key  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    created_at       DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    attempts         INT NOT NULL DEFAULT 0,
    last_error       TEXT,
    next_attempt_at  DATETIME(6),
    lease_until      DATETIME(6),
    leased_by        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    published_at     DATETIME(6),
    dead_lettered_at DATETIME(6),
    pending          TINYINT GENERATED ALWAYS AS (published_at IS NULL AND dead_lettered_at IS NULL) STORED,
    undelivered      TINYINT GENERATED ALWAYS AS (published_at IS NULL) STORED{extra_column_defs},
    UNIQUE KEY {id_key} (id){idempotency_constraint},
    -- Events still to deliver, in delivery order.
    KEY {pending_idx} (pending, sequence),
    -- Undelivered events per ordering key (dead-lettered ones included: they hold their key back).
    KEY {pending_key_idx} (undelivered, ordering_key, sequence),
    KEY {published_idx} (published_at),
    KEY {dead_idx} (dead_lettered_at),
    KEY {topic_idx} (topic, sequence){extra_foreign_keys}
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
-- Strict per-key commit order: a writer locks its key's row here (inserting it the first time)
-- until its transaction ends, so the writers of one key commit in sequence order. Keys are
-- stored as their SHA-256, one row per key ever written with strict order.
CREATE TABLE IF NOT EXISTS {key_locks} (
    lock_key BINARY(32) NOT NULL PRIMARY KEY
) ENGINE = InnoDB;
