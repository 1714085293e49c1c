-- One message, or one run of same-shape messages in the given order: a plain INSERT, so a taken
-- idempotency key fails with ER_DUP_ENTRY on its own unique index (told apart from any other
-- unique violation by the index's name) and the stored event is read back instead.
INSERT INTO {table} ({insert_columns})
VALUES {insert_rows}
