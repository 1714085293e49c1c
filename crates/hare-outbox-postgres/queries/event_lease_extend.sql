UPDATE {table}
SET lease_until = $3
WHERE sequence = ANY($1) AND leased_by = $2 AND published_at IS NULL
