//! Core of hare-outbox: the event and message types, validation, errors, the [`Backend`] and
//! [`Delivery`] seams and the relay policy. It writes no SQL and names no broker; use it through
//! the `hare-outbox` facade crate.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
pub mod capture;
pub mod delivery;
pub mod error;
pub mod event;
pub mod extra;
pub mod inbox;
pub mod journal;
pub mod json;
pub mod message;
pub mod migration;
pub mod outbox;
pub mod received;
pub mod redact;
pub mod relay;
pub mod secrets;
pub mod table;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod topic;
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod trace_context;
pub mod wakeup;

pub use backend::params::{Backlog, FinishedState};
pub use backend::{Backend, Capabilities, CaptureBackend, InboxBackend, JournalBackend};
pub use capture::{CaptureContext, CaptureStatus, ChangeCapture, ChangePayload, RowOperation};
pub use delivery::{
    BatchDelivery, Delivery, DeliveryReport, Destination, DestinationSpec, FnDelivery,
    JsonLinesDelivery, TopicRouter,
};
pub use error::{BoxError, DeliveryError, DeliveryErrorKind, Error, Result};
pub use event::{
    EVENT_ID_HEADER, EventStatus, MAX_KEY_CHARS, OutboxEvent, StoredRow, TOPIC_HEADER,
};
pub use extra::{ColumnType, ExtraColumn, ExtraValue};
pub use inbox::Inbox;
pub use journal::{CleanupOutcome, EventPage, EventQuery, Journal};
pub use message::OutboxMessage;
pub use migration::{MigrationStatus, MigrationStream};
pub use outbox::{Outbox, OutboxTransaction};
pub use received::ReceivedEvent;
pub use relay::{
    BreakerConfig, BreakerState, CONCURRENCY_RANGE, DestinationStatus, Destinations,
    MIN_DELIVERY_TIMEOUT, MIN_LEASE, MIN_POLL_INTERVAL, OutboxRelay, PollOutcome, RelayConfig,
    RelayEvent, RelayObserver, RelayStats,
};
pub use table::{IdempotencyScope, OutboxTable};
pub use topic::{TopicFilter, TopicPattern};
pub use wakeup::{InProcessWakeup, Wakeup, WakeupSubscription};

/// Re-exported so callers can pass a shutdown signal to [`OutboxRelay::run`].
pub use tokio_util::sync::CancellationToken;
