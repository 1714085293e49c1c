-- The trigger function of one captured table, generated at install from the catalog.
-- Placeholders (filled by src/capture.rs, every identifier quoted, every literal quoted):
-- {function} the function; {outbox} the schema-qualified outbox table; {tag} the dollar-quote
-- tag; {changed} the CASE list of captured columns that differ; {insert}, {update}, {delete} the
-- statements that fill v_before, v_after and v_pk per operation; {key} the ordering-key
-- expression over v_pk (NULL when unordered); {topic_insert}, {topic_update}, {topic_delete},
-- {label} and {table_name} (the captured table's name, unqualified) literals; {occurred_at} the
-- ISO 8601 UTC text of statement_timestamp();
-- The transaction's context (Outbox::set_context) is read from the settings hare_outbox.headers
-- (merged into the headers) and hare_outbox.payload (keys merged into the envelope).
-- {extra_columns} and {extra_values} the outbox columns copied from the row; {notify} nothing,
-- or the PERFORM pg_notify(channel, v_topic) of a capture declared with `notify`;
-- {skip_unchanged} nothing (every updated row writes an event), or, for a capture declared with
-- `skip_unchanged`, the early return of an UPDATE that changed no captured column.
--
-- One event per row, written by the writing statement in its transaction while it holds the
-- row's lock, so the events of one row get sequences in commit order. With `notify`, the
-- NOTIFY rides the same transaction: PostgreSQL delivers it at commit (never after a rollback) and
-- folds identical ones, so a statement touching many rows notifies once per topic.
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger
LANGUAGE plpgsql
AS ${tag}$
DECLARE
    v_changed text[];
    v_before jsonb;
    v_after jsonb;
    v_pk jsonb;
    v_key text;
    v_topic text;
    v_ctx text := current_setting('hare_outbox.headers', true);
    v_headers jsonb := '{}';
    v_ctx_payload text := current_setting('hare_outbox.payload', true);
    v_added jsonb := '{}';
    -- UUID v7: 48 bits of Unix milliseconds, version 7, 74 random bits with the RFC 4122 variant
    -- (gen_random_uuid() supplies the random bits and the variant).
    v_rand bytea := uuid_send(gen_random_uuid());
    v_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
BEGIN
    IF TG_OP = 'INSERT' THEN
        {insert}
    ELSIF TG_OP = 'UPDATE' THEN
        v_changed := array_remove(ARRAY[{changed}]::text[], NULL);{skip_unchanged}
        {update}
    ELSE
        {delete}
    END IF;
    IF v_ctx IS NOT NULL AND v_ctx <> '' THEN
        v_headers := v_ctx::jsonb;
        IF jsonb_typeof(v_headers) <> 'object' THEN
            v_headers := '{}';
        END IF;
    END IF;
    IF v_ctx_payload IS NOT NULL AND v_ctx_payload <> '' THEN
        v_added := v_ctx_payload::jsonb;
        IF jsonb_typeof(v_added) <> 'object' THEN
            v_added := '{}';
        END IF;
    END IF;
    v_key := {key};
    IF length(v_key) > 255 THEN
        v_key := left(v_key, 190) || '#' || encode(sha256(convert_to(v_key, 'UTF8')), 'hex');
    END IF;
    v_topic := CASE TG_OP WHEN 'INSERT' THEN {topic_insert} WHEN 'UPDATE' THEN {topic_update} ELSE {topic_delete} END;
    INSERT INTO {outbox} (id, topic, payload, headers, ordering_key{extra_columns})
    VALUES (
        encode(
            overlay(set_byte(v_rand, 6, (get_byte(v_rand, 6) & 15) | 112)
                    PLACING substring(int8send(v_ms) FROM 3) FROM 1 FOR 6),
            'hex')::uuid,
        v_topic,
        -- The context's payload keys first: on a clash (never written by the library) the
        -- envelope's own key wins.
        v_added || jsonb_build_object(
            'model', {label},
            'table', {table_name},
            'operation', CASE TG_OP WHEN 'INSERT' THEN 'inserted' WHEN 'UPDATE' THEN 'updated' ELSE 'deleted' END,
            'pk', v_pk,
            'changed', to_jsonb(v_changed),
            'before', v_before,
            'after', v_after,
            'occurred_at', {occurred_at}),
        v_headers,
        v_key{extra_values}
    );{notify}
    RETURN NULL;
END
${tag}$;
