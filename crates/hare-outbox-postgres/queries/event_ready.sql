-- Whether the row aliased {a} may be leased now: not dead, due, and not leased by a live relay.
-- Spliced into event_lease.sql once per alias, followed by event_topic_filter.sql when the relay
-- takes only some topics.
{a}.dead_lettered_at IS NULL
      AND ({a}.next_attempt_at IS NULL OR {a}.next_attempt_at <= (SELECT now FROM clock))
      AND ({a}.lease_until IS NULL OR {a}.lease_until < (SELECT now FROM clock))
