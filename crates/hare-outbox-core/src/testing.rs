//! Helpers for the tests of a service that uses the outbox (the `testing` feature): what a
//! handler enqueued, a delivery that records what it got, and a relay drained in one call.
//!
//! ```no_run
//! # async fn f<B: hare_outbox_core::Backend>(outbox: hare_outbox_core::Outbox<B>) -> Result<(), Box<dyn std::error::Error>> {
//! use hare_outbox_core::testing::RecordingDelivery;
//! use hare_outbox_core::{OutboxMessage, OutboxRelay, RelayConfig};
//! use serde_json::json;
//!
//! // The handler under test enqueued in its transaction …
//! let mut tx = outbox.begin().await?;
//! tx.enqueue(OutboxMessage::new("orders.created", json!({"id": 7}))).await?;
//!
//! // … and the test sees it before the commit, on the same connection:
//! let event = outbox.assert_enqueued(&mut tx, "orders.created").await;
//! assert_eq!(event.payload, json!({"id": 7}));
//! tx.commit().await?;
//!
//! // After the commit, a relay drained in one call delivers it to a recording delivery.
//! let delivery = RecordingDelivery::new();
//! let relay = OutboxRelay::new(outbox, delivery.clone(), RelayConfig::default())?;
//! assert_eq!(relay.drain_for_test().await?.delivered, 1);
//! assert_eq!(delivery.topics(), ["orders.created"]);
//! # Ok(()) }
//! ```
//!
//! The facade's `hare_outbox::testing` runs the same example on SQLite.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{Backend, EventListPendingParams};
use crate::delivery::Delivery;
use crate::error::{DeliveryError, Result};
use crate::event::OutboxEvent;
use crate::outbox::Outbox;
use crate::relay::{OutboxRelay, PollOutcome};

/// The most events [`Outbox::enqueued`] returns.
pub const ENQUEUED_LIMIT: u32 = 10_000;

/// The most polls [`OutboxRelay::drain_for_test`] runs before it gives up.
pub const DRAIN_MAX_POLLS: usize = 100_000;

impl<B: Backend> Outbox<B> {
    /// The events `conn` sees that no relay has delivered or dead-lettered yet, oldest first (at
    /// most [`ENQUEUED_LIMIT`]): inside a transaction, those it enqueued (uncommitted) and the
    /// committed ones; in a test with a database of its own, what the code under test enqueued.
    ///
    /// # Errors
    /// [`Error::Database`](crate::Error::Database) when the query fails.
    pub async fn enqueued(&self, conn: &mut B::Conn) -> Result<Vec<OutboxEvent>> {
        self.backend()
            .event_list_pending_on(
                conn,
                self.table(),
                &EventListPendingParams::new(ENQUEUED_LIMIT),
            )
            .await
    }

    /// The newest event of `topic` among [`enqueued`](Self::enqueued): for a test asserting
    /// that a handler enqueued it.
    ///
    /// # Panics
    /// When there is none (the message lists the topics that were enqueued), or when the
    /// events cannot be read.
    pub async fn assert_enqueued(&self, conn: &mut B::Conn, topic: &str) -> OutboxEvent {
        let events = match self.enqueued(conn).await {
            Ok(events) => events,
            Err(error) => panic!(
                "the enqueued events of {} cannot be read: {error}",
                self.table()
            ),
        };
        let seen: Vec<String> = events.iter().map(|e| e.topic.clone()).collect();
        match events.into_iter().rev().find(|e| e.topic == topic) {
            Some(event) => event,
            None => panic!(
                "no event of topic {topic:?} was enqueued in {}; pending topics: {seen:?}",
                self.table()
            ),
        }
    }
}

impl<B: Backend> OutboxRelay<B> {
    /// Polls until a poll leases nothing, and returns the totals of every poll: in a test, one
    /// call delivers everything that is due. Events that failed and wait for their retry, or
    /// that wait behind a failed event of their key, are not waited for (their retry time is in
    /// the future); check [`PollOutcome::failed`] and [`PollOutcome::dead_lettered`].
    ///
    /// # Errors
    /// As [`poll_once`](Self::poll_once); [`Error::Configuration`](crate::Error::Configuration)
    /// when [`DRAIN_MAX_POLLS`] polls still leased events (a producer keeps writing).
    pub async fn drain_for_test(&self) -> Result<PollOutcome> {
        let mut total = PollOutcome::default();
        for _ in 0..DRAIN_MAX_POLLS {
            let outcome = self.poll_once().await?;
            if outcome.leased == 0 {
                return Ok(total);
            }
            total.leased += outcome.leased;
            total.delivered += outcome.delivered;
            total.failed += outcome.failed;
            total.dead_lettered += outcome.dead_lettered;
            total.released += outcome.released;
            total.deferred += outcome.deferred;
        }
        Err(crate::Error::configuration(format!(
            "the relay still leased events after {DRAIN_MAX_POLLS} polls; is something enqueueing all the time?"
        )))
    }
}

/// A delivery that keeps every event it is given, in delivery order, and succeeds. Clones share
/// one record: give one clone to the relay and read the other.
#[derive(Debug, Clone, Default)]
pub struct RecordingDelivery {
    events: Arc<Mutex<Vec<OutboxEvent>>>,
}

impl RecordingDelivery {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every event delivered so far, in delivery order (an event delivered twice appears
    /// twice).
    pub fn events(&self) -> Vec<OutboxEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The topics of [`events`](Self::events), in delivery order.
    pub fn topics(&self) -> Vec<String> {
        self.events().into_iter().map(|e| e.topic).collect()
    }

    /// Forgets the events recorded so far.
    pub fn clear(&self) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Waits until at least `count` events were delivered or `timeout` passes (checking every
    /// 10 ms); returns the events either way, for a relay running in the background.
    pub async fn wait_for(&self, count: usize, timeout: Duration) -> Vec<OutboxEvent> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let events = self.events();
            if events.len() >= count || tokio::time::Instant::now() >= deadline {
                return events;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[async_trait]
impl Delivery for RecordingDelivery {
    async fn deliver(&self, event: &OutboxEvent) -> std::result::Result<(), DeliveryError> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event.clone());
        Ok(())
    }
}
