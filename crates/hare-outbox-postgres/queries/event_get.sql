SELECT {columns} FROM {table} WHERE id = $1
