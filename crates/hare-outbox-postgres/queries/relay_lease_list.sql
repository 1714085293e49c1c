-- The relays holding leases, one page in name order.
-- $1 names after this one ('' = from the first), $2 the page size, $3 the clock a live lease is
-- judged by.
-- A relay's leases are on undelivered rows only (marks clear leased_by), so this reads the rows
-- still to deliver, never the published history. Expired: the lease ran out while the row still
-- names the relay (it stopped or stalls; another relay takes the row once due).
SELECT o.leased_by,
       count(*) FILTER (WHERE o.lease_until > $3) AS live,
       count(*) FILTER (WHERE NOT coalesce(o.lease_until > $3, false)) AS expired,
       max(o.lease_until) AS lease_until_max,
       min(o.lease_until) AS lease_until_min
FROM {table} o
WHERE o.published_at IS NULL AND o.leased_by IS NOT NULL AND o.leased_by > $1
GROUP BY o.leased_by
ORDER BY o.leased_by
LIMIT $2
