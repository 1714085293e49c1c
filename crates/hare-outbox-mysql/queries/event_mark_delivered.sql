-- The clock (NULL = the database's), then {sequences}. An event another relay already
-- published keeps its first published_at.
UPDATE {table}
SET published_at = COALESCE(?, UTC_TIMESTAMP(6)), lease_until = NULL, leased_by = NULL,
    dead_lettered_at = NULL
WHERE sequence IN ({sequences}) AND published_at IS NULL
