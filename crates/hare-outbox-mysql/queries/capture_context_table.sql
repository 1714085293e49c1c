-- The table capture triggers read the transaction's context from, in the outbox table's
-- database: one row per connection that set a context (its CONNECTION_ID()), with the session's
-- token (@hare_outbox_session), the session's count of BEGIN, COMMIT and ROLLBACK statements
-- when it was set, the headers' JSON text and the JSON text of the keys merged into the envelope
-- (NULL for none). {table} the database-qualified context table.
CREATE TABLE IF NOT EXISTS {table} (
    connection_id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    session       CHAR(36) NOT NULL,
    marks         BIGINT NOT NULL,
    headers       LONGTEXT NOT NULL,
    payload       LONGTEXT
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
