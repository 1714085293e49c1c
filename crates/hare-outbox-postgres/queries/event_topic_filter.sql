-- The relay's topics for the row aliased {a}, appended to event_ready.sql: $5 every topic?, $6
-- included names, $7 included prefixes, $8 excluded names, $9 excluded prefixes. A relay of every
-- topic runs the lease without it (and without $5..$9), so PostgreSQL can keep a generic plan.
      AND ($5 OR {a}.topic = ANY($6)
           OR EXISTS (SELECT 1 FROM unnest($7::text[]) AS p(prefix) WHERE starts_with({a}.topic, p.prefix)))
      AND NOT ({a}.topic = ANY($8)
           OR EXISTS (SELECT 1 FROM unnest($9::text[]) AS p(prefix) WHERE starts_with({a}.topic, p.prefix)))
