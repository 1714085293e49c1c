//! What the relay reports about itself.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// One thing that happened to one event in a relay, reported after its mark was written.
///
/// An outcome whose mark changed nothing is not reported: when a failure mark finds none of the
/// batch's events still leased by this relay (its lease expired and another relay took them), or
/// a delivered mark finds them all published by another relay already. A failed delivery is also
/// logged by `tracing` when it happens: at WARN when it will be retried, at ERROR when the event is
/// dead-lettered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RelayEvent {
    /// The event was delivered and marked published.
    Delivered {
        /// The event id.
        event_id: Uuid,
        /// The topic.
        topic: String,
        /// The outbox table (`schema.table` when qualified).
        table: String,
        /// The model label of a captured event (its payload's `model`, `app.Model`); `None` for
        /// an event enqueued by hand without one.
        model: Option<String>,
        /// Failed attempts before this delivery.
        attempts: i32,
        /// Seconds from `created_at` to delivery (relay clock minus database clock).
        delay_seconds: f64,
    },
    /// A delivery failed; the event will be tried again at `next_attempt_at`.
    DeliveryFailed {
        /// The event id.
        event_id: Uuid,
        /// The topic.
        topic: String,
        /// The outbox table (`schema.table` when qualified).
        table: String,
        /// The model label of a captured event (its payload's `model`, `app.Model`); `None` for
        /// an event enqueued by hand without one.
        model: Option<String>,
        /// Failed attempts including this one.
        attempts: i32,
        /// The delivery error with its sources.
        error: String,
        /// When the event is tried again.
        next_attempt_at: DateTime<Utc>,
    },
    /// The event's destination is open (circuit breaker): the event was not sent, or failed
    /// after the destination opened. It waits for the destination's next probe with its
    /// attempts unchanged; nothing was counted against it.
    Deferred {
        /// The event id.
        event_id: Uuid,
        /// The topic.
        topic: String,
        /// The outbox table (`schema.table` when qualified).
        table: String,
        /// The model label of a captured event; `None` for an event enqueued by hand without
        /// one.
        model: Option<String>,
        /// Failed attempts so far, unchanged.
        attempts: i32,
        /// Why: the destination is open, and the failure that opened it.
        error: String,
        /// When the event is due again (the destination's next probe).
        next_attempt_at: DateTime<Utc>,
    },
    /// A delivery failed and the event ran out of attempts, or the failure was permanent
    /// ([`DeliveryErrorKind::Permanent`](crate::error::DeliveryErrorKind::Permanent)).
    DeadLettered {
        /// The event id.
        event_id: Uuid,
        /// The topic.
        topic: String,
        /// The outbox table (`schema.table` when qualified).
        table: String,
        /// The model label of a captured event (its payload's `model`, `app.Model`); `None` for
        /// an event enqueued by hand without one.
        model: Option<String>,
        /// Failed attempts including this one.
        attempts: i32,
        /// The delivery error with its sources.
        error: String,
    },
}

/// Receives [`RelayEvent`]s. Called on the relay's task right after the marks are written: keep it
/// quick (hand long work to a channel).
pub trait RelayObserver: Send + Sync + 'static {
    /// Called once per event outcome.
    fn observe(&self, event: &RelayEvent);
}

impl<F: Fn(&RelayEvent) + Send + Sync + 'static> RelayObserver for F {
    fn observe(&self, event: &RelayEvent) {
        self(event)
    }
}

/// Totals since the relay was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Polls finished (empty and failed ones included); counted at the end of each poll.
    pub polls: u64,
    /// Events leased.
    pub leased: u64,
    /// Events delivered and marked published.
    pub delivered: u64,
    /// Failed deliveries recorded for a later retry.
    pub failed: u64,
    /// Events dead-lettered.
    pub dead_lettered: u64,
}
