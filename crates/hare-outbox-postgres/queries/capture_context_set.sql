-- The transaction's context, read by every capture trigger; transaction-local (gone at COMMIT
-- or ROLLBACK, undone by ROLLBACK TO SAVEPOINT). $1 the headers' JSON text, $2 the JSON text of
-- the keys merged into the envelope; '' clears each.
SELECT set_config('hare_outbox.headers', $1, true), set_config('hare_outbox.payload', $2, true)
