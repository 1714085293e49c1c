-- Held by every migrate until the end of its transaction while it creates the schema and the
-- record's table: CREATE … IF NOT EXISTS of one name from two sessions races on the catalog.
-- Transaction-scoped, so it works behind a transaction pooler.
SELECT pg_advisory_xact_lock(hashtext('hare_outbox.migrate'))
