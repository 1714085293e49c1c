SELECT {columns} FROM {table} WHERE idempotency_key = ANY($1)
