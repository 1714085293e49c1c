-- Events by sequence ({sequences}), in sequence order.
SELECT {columns} FROM {table} WHERE sequence IN ({sequences}) ORDER BY sequence
