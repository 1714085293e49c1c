-- Leases the chosen events ({sequences}, bound after the lease's end and the relay's name).
UPDATE {table} SET lease_until = ?, leased_by = ?
WHERE sequence IN ({sequences}) AND published_at IS NULL
