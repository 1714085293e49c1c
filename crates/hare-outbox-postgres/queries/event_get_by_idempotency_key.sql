SELECT {columns} FROM {table} WHERE idempotency_key = $1
