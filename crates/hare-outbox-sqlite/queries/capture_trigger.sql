-- One capture trigger (one per captured operation), generated at install from PRAGMA table_info.
-- Placeholders (filled by src/capture.rs, identifiers quoted, literals quoted):
-- {trigger} the schema-qualified trigger; {operation} INSERT, UPDATE or DELETE; {table} the
-- captured table (unqualified: a trigger lives in its table's database); {when} `WHEN …` or
-- nothing; {record} the install record as a comment; {outbox} the outbox table (same database);
-- {topic}, {label}, {table_name} (the captured table's name), {past} literals; {pk},
-- {changed}, {before}, {after} JSON expressions over NEW/OLD; {key} the ordering key's text
-- (NULL when unordered) and {long_key} its form past 255 characters over g.k; {extra_columns},
-- {extra_values} the outbox columns copied from the row.
--
-- 'now' is fixed for one statement in SQLite, so every row of a statement carries one time.
-- created_at is written in the outbox table's fixed format (six fractional digits, Z).
-- The context (headers, payload keys) counts only while defer_foreign_keys is on: the context
-- call turns it on and SQLite turns it off at every COMMIT and ROLLBACK, so a context never
-- outlives its transaction. The context's payload keys are appended to the envelope's text:
-- the envelope always ends with the string of occurred_at and one '}', which rtrim removes; the
-- keys (never one of the envelope's, checked by the core) follow from the stored object's text
-- without its '{'. json_patch is not used: it would drop null values.
CREATE TRIGGER {trigger} AFTER {operation} ON {table} FOR EACH ROW {when}
BEGIN
    {record}
    INSERT INTO {outbox} (id, topic, payload, headers, ordering_key, created_at{extra_columns})
    SELECT
        substr(g.t, 1, 8) || '-' || substr(g.t, 9, 4) || '-7' || substr(g.r, 1, 3) || '-'
            || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(g.r, 4, 3) || '-'
            || substr(g.r, 7, 12),
        {topic},
        rtrim(json_object(
            'model', {label},
            'table', {table_name},
            'operation', {past},
            'pk', {pk},
            'changed', {changed},
            'before', {before},
            'after', {after},
            'occurred_at', substr(g.f, 1, 19)
                || CASE WHEN substr(g.f, 21, 3) = '000' THEN '' ELSE '.' || substr(g.f, 21, 3) || '000' END
                || '+00:00'), '}')
            || coalesce(',' || substr(nullif(
                   CASE WHEN (SELECT defer_foreign_keys FROM pragma_defer_foreign_keys()) = 1
                        THEN (SELECT c.payload FROM "hare_outbox_context" AS c WHERE c.id = 1) END,
                   '{}'), 2), '}'),
        CASE WHEN (SELECT defer_foreign_keys FROM pragma_defer_foreign_keys()) = 1
             THEN coalesce((SELECT c.headers FROM "hare_outbox_context" AS c WHERE c.id = 1), '{}')
             ELSE '{}' END,
        CASE WHEN length(g.k) > 255 THEN {long_key} ELSE g.k END,
        g.f || '000Z'{extra_values}
    FROM (SELECT printf('%012x', CAST(round(unixepoch('subsec') * 1000) AS INTEGER)) AS t,
                 lower(hex(randomblob(9))) AS r,
                 strftime('%Y-%m-%dT%H:%M:%f', 'now') AS f,
                 {key} AS k) AS g;
END
