-- The transaction's context headers, read by every capture trigger; transaction-local (gone at
-- COMMIT or ROLLBACK, undone by ROLLBACK TO SAVEPOINT). $1 the headers' JSON text, '' to clear.
SELECT set_config('hare_outbox.headers', $1, true)
