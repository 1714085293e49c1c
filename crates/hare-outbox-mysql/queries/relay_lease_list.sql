-- The relays holding leases, one page in name order. Bound: the clock a live lease is judged by
-- (twice), names after ? ('' = from the first), the page size.
-- A relay's leases are on undelivered rows only (marks clear leased_by), so this reads the rows
-- still to deliver, never the published history.
SELECT o.leased_by,
       CAST(SUM(COALESCE(o.lease_until > ?, FALSE)) AS SIGNED) AS live,
       CAST(SUM(NOT COALESCE(o.lease_until > ?, FALSE)) AS SIGNED) AS expired,
       MAX(o.lease_until) AS lease_until_max,
       MIN(o.lease_until) AS lease_until_min
FROM {table} AS o FORCE INDEX ({pending_key_idx})
WHERE o.undelivered = 1 AND o.leased_by IS NOT NULL AND o.leased_by > ?
GROUP BY o.leased_by
ORDER BY o.leased_by
LIMIT ?
