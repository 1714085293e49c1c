SELECT {columns} FROM {table} WHERE id = ?
