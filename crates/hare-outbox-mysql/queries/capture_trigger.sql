-- One capture trigger (one per captured operation), generated at install from
-- information_schema. Placeholders (filled by src/capture.rs, identifiers quoted, literals
-- quoted): {create} `CREATE TRIGGER` or, on MariaDB, `CREATE OR REPLACE TRIGGER`; {trigger} the
-- database-qualified trigger; {operation} INSERT, UPDATE or DELETE;
-- {table} the database-qualified captured table; {record} the install record as a comment;
-- {when} the condition the row must meet (`TRUE`, or a changed captured column with
-- skip_unchanged); {outbox} the database-qualified outbox table; {context} the context table;
-- {marks} the session's count of transaction boundaries; {topic}, {label}, {table_name},
-- {past} literals; {pk}, {changed}, {before}, {after} JSON expressions over NEW/OLD; {key} the
-- ordering key's text (NULL when unordered); {extra_columns}, {extra_values} the outbox columns
-- copied from the row.
--
-- The context (headers, payload keys) is the row of this connection in the context table, taken
-- only while the session's token matches and the session's count of BEGIN, COMMIT and ROLLBACK
-- statements is the one stored with it: it never outlives its transaction (see src/capture.rs).
-- Reading that count costs more than the rest of the trigger, so it is read only when the
-- session has a context row, and a row found stale is deleted (in the current transaction):
-- later rows of the connection skip the check until the next set_context.
-- The context's payload keys never repeat an envelope key (the core checks), so
-- JSON_MERGE_PRESERVE only adds them; JSON_MERGE_PATCH would drop null values.
{create} {trigger} AFTER {operation} ON {table} FOR EACH ROW
BEGIN
    {record}
    DECLARE hare_context_headers LONGTEXT DEFAULT NULL;
    DECLARE hare_context_payload LONGTEXT DEFAULT NULL;
    DECLARE hare_context_marks BIGINT DEFAULT NULL;
    IF {when} THEN
    IF @hare_outbox_session IS NOT NULL THEN
        SELECT MAX(c.headers), MAX(c.payload), MAX(c.marks)
        INTO hare_context_headers, hare_context_payload, hare_context_marks
        FROM {context} AS c
        WHERE c.connection_id = CONNECTION_ID() AND c.session = @hare_outbox_session;
        IF hare_context_marks IS NOT NULL AND hare_context_marks <> {marks} THEN
            DELETE FROM {context}
            WHERE connection_id = CONNECTION_ID() AND marks = hare_context_marks;
            SET hare_context_headers = NULL, hare_context_payload = NULL;
        END IF;
    END IF;
    INSERT INTO {outbox} (id, topic, payload, headers, ordering_key, created_at{extra_columns})
    SELECT
        UNHEX(CONCAT(LPAD(HEX(g.ms), 12, '0'), '7', SUBSTR(g.r, 1, 3),
            HEX(8 + FLOOR(RAND() * 4)), SUBSTR(g.r, 4, 15))),
        {topic},
        JSON_MERGE_PRESERVE(
            JSON_OBJECT(
                'model', {label},
                'table', {table_name},
                'operation', {past},
                'pk', {pk},
                'changed', {changed},
                'before', {before},
                'after', {after},
                'occurred_at', DATE_FORMAT(g.at, '%Y-%m-%dT%H:%i:%s.%f+00:00')),
            COALESCE(hare_context_payload, '{}')),
        COALESCE(hare_context_headers, '{}'),
        CASE WHEN CHAR_LENGTH(g.k) > 255
             THEN CONCAT(LEFT(g.k, 190), '#', SHA2(g.k, 256))
             ELSE g.k END,
        g.at{extra_values}
    FROM (SELECT FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) AS ms,
                 MD5(CONCAT(RAND(), '/', UUID())) AS r,
                 UTC_TIMESTAMP(6) AS at,
                 CAST({key} AS CHAR CHARACTER SET utf8mb4) AS k) AS g;
    END IF;
END
