INSERT INTO {table} ({insert_columns})
VALUES ({insert_values})
{on_conflict}
RETURNING {columns}
