//! Deliveries that record what they were given.
