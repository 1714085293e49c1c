-- Whether the row aliased {a} may be leased at the lease's clock (bound twice, first): not dead,
-- due, and not leased by a live relay.
({a}.dead_lettered_at IS NULL
      AND ({a}.next_attempt_at IS NULL OR {a}.next_attempt_at <= ?)
      AND ({a}.lease_until IS NULL OR {a}.lease_until < ?))
