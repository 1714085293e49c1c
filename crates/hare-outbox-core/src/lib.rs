//! Core of hare-outbox: the event and message types, validation, errors, the [`Backend`] and
//! [`Delivery`] seams and the relay policy. It writes no SQL and names no broker; use it through
//! the `hare-outbox` facade crate.

pub mod backend;
pub mod delivery;
pub mod error;
pub mod event;
pub mod message;
pub mod outbox;
pub mod relay;
pub mod table;
pub mod topic;

pub use backend::Backend;
pub use backend::Backlog;
pub use delivery::{Delivery, FnDelivery, JsonLinesDelivery};
pub use error::{BoxError, DeliveryError, Error, Result};
pub use event::{EVENT_ID_HEADER, EventStatus, OutboxEvent, TOPIC_HEADER};
pub use message::OutboxMessage;
pub use outbox::Outbox;
pub use relay::{OutboxRelay, PollOutcome, RelayConfig, RelayEvent, RelayObserver, RelayStats};
pub use table::OutboxTable;
pub use topic::{TopicFilter, TopicPattern};

/// Re-exported so callers can pass a shutdown signal to [`OutboxRelay::run`].
pub use tokio_util::sync::CancellationToken;
