-- Releases leased events without counting an attempt, only while this relay still holds them:
-- {sequences}, then leased_by.
UPDATE {table}
SET lease_until = NULL, leased_by = NULL
WHERE sequence IN ({sequences}) AND leased_by = ? AND published_at IS NULL
