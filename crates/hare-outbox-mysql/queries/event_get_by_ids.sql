-- The events just inserted, by id ({ids}: one placeholder per id).
SELECT {columns} FROM {table} WHERE id IN ({ids})
