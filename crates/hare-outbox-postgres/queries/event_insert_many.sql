-- One run of same-shape messages: the arrays hold one element per message, in the given order.
INSERT INTO {table} ({insert_columns})
SELECT {insert_columns} FROM unnest({unnest_args}) WITH ORDINALITY AS u({insert_columns}, ord)
ORDER BY u.ord
{on_conflict}
RETURNING {columns}
