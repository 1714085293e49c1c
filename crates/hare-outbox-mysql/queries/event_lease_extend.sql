-- Extends the lease of a batch still held by its relay: the clock (NULL = the database's), the
-- lease in microseconds, then {sequences} and leased_by.
UPDATE {table}
SET lease_until = DATE_ADD(COALESCE(?, UTC_TIMESTAMP(6)), INTERVAL ? MICROSECOND)
WHERE sequence IN ({sequences}) AND leased_by = ? AND published_at IS NULL
