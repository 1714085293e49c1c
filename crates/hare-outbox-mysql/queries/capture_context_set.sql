-- Stores the transaction's context for this connection, in the transaction (a rollback, or a
-- rollback to an earlier savepoint, takes it back). ? the headers' JSON text, ? the JSON text of
-- the keys merged into the envelope (NULL for none). {table} the context table; {marks} the
-- session's count of BEGIN, COMMIT and ROLLBACK statements.
INSERT INTO {table} (connection_id, session, marks, headers, payload)
VALUES (CONNECTION_ID(), @hare_outbox_session, {marks}, ?, ?)
ON DUPLICATE KEY UPDATE session = VALUES(session), marks = VALUES(marks),
    headers = VALUES(headers), payload = VALUES(payload)
