-- Outbox version 1 (SQLite): the outbox table and its indexes, as `migrate` created them before
-- versions were recorded (a table made then is adopted as this version). Idempotent (IF NOT
-- EXISTS). A released migration is never edited: its checksum is recorded; a change of schema is
-- a new file.
-- Timestamps are UTC text in one fixed format, YYYY-MM-DDTHH:MM:SS.ffffffZ, so text order is time order.
-- idempotency_key is UNIQUE when keys are unique in the whole table (the default); keys unique per
-- tenant get a unique constraint on the tenant column and the key instead, and a table without key
-- uniqueness neither. The declared extra columns follow dead_lettered_at; those missing from an
-- existing table are added by migrate (table_columns.sql, add_column.sql).
CREATE TABLE IF NOT EXISTS {table} (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    topic TEXT NOT NULL,
    payload TEXT NOT NULL,
    headers TEXT NOT NULL DEFAULT '{}',
    ordering_key TEXT,
    idempotency_key TEXT{idempotency_key_unique},
    created_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    next_attempt_at TEXT,
    lease_until TEXT,
    leased_by TEXT,
    published_at TEXT,
    dead_lettered_at TEXT{extra_column_defs}{idempotency_constraint}
);

-- Pending rows in delivery order.
CREATE INDEX IF NOT EXISTS {schema_prefix}{pending_idx}
    ON {table_name} (sequence)
    WHERE published_at IS NULL AND dead_lettered_at IS NULL;

-- Undelivered rows per ordering key; dead-lettered rows are kept in on purpose: they hold back
-- the later events of their key.
CREATE INDEX IF NOT EXISTS {schema_prefix}{pending_key_idx}
    ON {table_name} (ordering_key, sequence)
    WHERE published_at IS NULL;

-- Published rows, for cleanup by age.
CREATE INDEX IF NOT EXISTS {schema_prefix}{published_idx}
    ON {table_name} (published_at)
    WHERE published_at IS NOT NULL;

-- Dead-lettered rows, for cleanup and retry.
CREATE INDEX IF NOT EXISTS {schema_prefix}{dead_idx}
    ON {table_name} (dead_lettered_at)
    WHERE dead_lettered_at IS NOT NULL;

-- Rows of one topic in order (relays limited to topics, the journal).
CREATE INDEX IF NOT EXISTS {schema_prefix}{topic_idx}
    ON {table_name} (topic, sequence);
