-- Whether the row aliased {a} may be leased now: not dead, due, not leased by a live relay, and of
-- the relay's topics (1 or 0). Spliced into event_lease.sql once per alias; ?1 and ?5..?9 as there.
({a}.dead_lettered_at IS NULL
      AND ({a}.next_attempt_at IS NULL OR {a}.next_attempt_at <= ?1)
      AND ({a}.lease_until IS NULL OR {a}.lease_until < ?1)
      AND (?5
           OR {a}.topic IN (SELECT value FROM json_each(?6))
           OR EXISTS (SELECT 1 FROM json_each(?7) AS p
                      WHERE substr({a}.topic, 1, length(p.value)) = p.value))
      AND NOT ({a}.topic IN (SELECT value FROM json_each(?8))
           OR EXISTS (SELECT 1 FROM json_each(?9) AS p
                      WHERE substr({a}.topic, 1, length(p.value)) = p.value)))
