-- Whether the row aliased {a} may be leased now: not dead, due, not leased by a live relay, and of
-- the relay's topics. Spliced into event_lease.sql once per alias; $1 and $5..$9 as there.
{a}.dead_lettered_at IS NULL
      AND ({a}.next_attempt_at IS NULL OR {a}.next_attempt_at <= (SELECT now FROM clock))
      AND ({a}.lease_until IS NULL OR {a}.lease_until < (SELECT now FROM clock))
      AND ($5 OR {a}.topic = ANY($6)
           OR EXISTS (SELECT 1 FROM unnest($7::text[]) AS p(prefix) WHERE starts_with({a}.topic, p.prefix)))
      AND NOT ({a}.topic = ANY($8)
           OR EXISTS (SELECT 1 FROM unnest($9::text[]) AS p(prefix) WHERE starts_with({a}.topic, p.prefix)))
