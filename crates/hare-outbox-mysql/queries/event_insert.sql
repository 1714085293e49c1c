-- One message, or one run of same-shape messages in the given order: a plain INSERT, so a taken
-- idempotency key fails with ER_DUP_ENTRY on its own unique index (told apart from any other
-- unique violation by the index's name) and the stored event is read back instead.
-- {returning}: `RETURNING` the stored rows on MariaDB (≥ 10.5); MySQL reads them back by id.
INSERT INTO {table} ({insert_columns})
VALUES {insert_rows}
{returning}
