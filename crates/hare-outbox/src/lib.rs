//! # hare-outbox
//!
//! A transactional outbox for Rust services. Write an event in the same database transaction as
//! the data it announces; a relay delivers it afterwards — at least once, strictly in order per
//! ordering key, with retries, backoff and dead letters.
//!
//! ## Quick start (SQLite, the default feature)
//!
//! ```
//! # #[cfg(feature = "sqlite")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use hare_outbox::sqlite::SqliteBackend;
//! use hare_outbox::{FnDelivery, Outbox, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig};
//! use serde_json::json;
//!
//! // A file database in real use (`hare_outbox::sqlite::connect("sqlite://app.db")`); an in-memory
//! // one must have a single connection, or each connection sees its own empty database.
//! let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
//! let outbox = Outbox::new(SqliteBackend::new(pool.clone()), OutboxTable::parse("outbox")?);
//! outbox.migrate().await?;
//!
//! // The event commits (or rolls back) with the business write. `wrap` keeps your sqlx
//! // transaction and adds one thing: after COMMIT it wakes the relays (never after a rollback).
//! let mut tx = outbox.wrap(pool.begin().await?);
//! sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT)").execute(&mut *tx).await?;
//! sqlx::query("INSERT INTO orders VALUES (22, 'confirmed')").execute(&mut *tx).await?;
//! tx.enqueue(
//!     OutboxMessage::new("sales.order.confirmed", json!({"id": 22})).ordering_key("sales_order:22"),
//! )
//! .await?;
//! tx.commit().await?;
//!
//! // A relay delivers it: here to a Rust function.
//! let relay = OutboxRelay::new(
//!     outbox,
//!     FnDelivery::new(|event| async move {
//!         println!("{} {}", event.topic, event.payload);
//!         Ok(())
//!     }),
//!     RelayConfig::default(),
//! )?;
//! assert_eq!(relay.poll_once().await?.delivered, 1);
//! # Ok(()) }
//! # #[cfg(not(feature = "sqlite"))]
//! # fn main() {}
//! ```
//!
//! ## Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `sqlite` (default) | [`sqlite::SqliteBackend`]: the embedded database, a single file, no server |
//! | `postgres` | [`postgres::PgBackend`]: PostgreSQL ≥ 13, `FOR UPDATE SKIP LOCKED` leases |
//! | `mysql` | [`mysql::MySqlBackend`]: MySQL ≥ 8.0 and MariaDB ≥ 10.6, `FOR UPDATE SKIP LOCKED` leases, change capture by triggers (not of rows changed by cascading foreign-key actions) |
//! | `webhook` | [`webhook::WebhookDelivery`]: HTTP POST with HMAC-SHA256 signatures, per-event targets, `allows_url`, attempt records |
//! | `redis` | [`redis::RedisStreamsDelivery`] (XADD, one pipeline per batch) and [`redis::RedisWakeup`] |
//! | `rabbitmq` | [`rabbitmq::RabbitMqDelivery`] (persistent, publisher confirms) and [`rabbitmq::RabbitMqWakeup`] |
//! | `kafka` | [`kafka::KafkaDelivery`] (idempotent, acks=all, key = ordering key) and [`kafka::KafkaWakeup`] |
//! | `mqtt` | [`mqtt::MqttDelivery`]: QoS 1, topic dots mapped to slashes |
//! | `nats` | [`nats::NatsDelivery`] (JetStream, `Nats-Msg-Id` dedup) and [`nats::NatsWakeup`] |
//! | `taskiq` | [`taskiq::TaskiqDelivery`]: task events executed by Python taskiq workers (Redis list broker; RabbitMQ too with `rabbitmq`) |
//! | `webhook-axum` | `webhook` plus [`webhook::receiver::VerifiedEvent`], an axum extractor that checks a webhook's signature and reads the event |
//! | `testing` | [`testing`]: `Outbox::enqueued` / `assert_enqueued`, [`testing::RecordingDelivery`], `OutboxRelay::drain_for_test` |
//! | `otel` | [`trace_context`]: W3C `traceparent`/`tracestate` written at enqueue from the current `tracing` span (through `tracing-opentelemetry`), a `hare_outbox.deliver` span per delivered event under it, [`ReceivedEvent::trace_context`] for consumers |
//! | `dashboard` | [`dashboard::Dashboard`]: the journal in a browser, a JSON API, `/metrics` and `/healthz`, as an axum `Router` to mount in your app |
//! | `tls-rustls-aws-lc-rs`, `tls-rustls-ring` | TLS for PostgreSQL connections through rustls, as sqlx names these features. None by default, as in sqlx; for another backend (`tls-native-tls`, native roots) enable it on your own `sqlx` dependency, which does the same |
//!
//! Nothing here turns on a sqlx TLS backend or sqlx's `migrate` (the outbox runs its own
//! migrations): your `sqlx` dependency decides.

#![cfg_attr(docsrs, feature(doc_cfg))]

// The user API, item by item (the backend seam is in `backend`, not here).
pub use hare_outbox_core::{
    Backlog, BatchDelivery, BreakerConfig, BreakerState, CONCURRENCY_RANGE, CancellationToken,
    CaptureContext, CaptureStatus, ChangeCapture, ChangePayload, CleanupOutcome, ColumnType,
    Delivery, DeliveryError, DeliveryErrorKind, DeliveryReport, Destination, DestinationSpec,
    DestinationStatus, Destinations, EVENT_ID_HEADER, Error, EventPage, EventQuery, EventStatus,
    ExtraColumn, ExtraValue, FinishedState, FnDelivery, IdempotencyScope, InProcessWakeup, Inbox,
    Journal, JsonLinesDelivery, MAX_KEY_CHARS, MIN_DELIVERY_TIMEOUT, MIN_LEASE, MIN_POLL_INTERVAL,
    MigrationStatus, MigrationStream, Outbox, OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable,
    OutboxTransaction, PollOutcome, ReceivedEvent, RelayConfig, RelayEvent, RelayObserver,
    RelayStats, Result, RowOperation, StoredRow, TOPIC_HEADER, TopicFilter, TopicPattern,
    TopicRouter, Wakeup, WakeupSubscription,
};
pub use hare_outbox_core::{
    BoxError, capture, delivery, error, event, extra, inbox, journal, json, message, migration,
    received, redact, relay, secrets, table, topic, wakeup,
};

/// The seam between the core and the database backends: the [`backend::Backend`] trait and its
/// abilities ([`backend::JournalBackend`], [`backend::CaptureBackend`],
/// [`backend::InboxBackend`]), their parameters and the SQL template renderer.
///
/// **Not for users, no stability promise**: it may change in any release. Name the traits only
/// as bounds of code generic over backends (`fn f<B: JournalBackend>(journal: &Journal<B>)`);
/// implement them only inside this workspace (see `docs/architecture.md`).
pub mod backend {
    pub use hare_outbox_core::backend::*;
}

/// The PostgreSQL backend.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres {
    pub use hare_outbox_postgres::*;
}

/// The MySQL / MariaDB backend (`hare-outbox-mysql`).
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod mysql {
    pub use hare_outbox_mysql::*;
}

/// The SQLite backend.
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite {
    pub use hare_outbox_sqlite::*;
}

/// Redis Streams delivery and Redis pub/sub wake-up.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis {
    pub use hare_outbox_redis::*;
}

/// NATS JetStream delivery and NATS wake-up.
#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub mod nats {
    pub use hare_outbox_nats::*;
}

/// RabbitMQ delivery with publisher confirms and the fanout wake-up.
#[cfg(feature = "rabbitmq")]
#[cfg_attr(docsrs, doc(cfg(feature = "rabbitmq")))]
pub mod rabbitmq {
    pub use hare_outbox_rabbitmq::*;
}

/// MQTT delivery (QoS 1, acknowledged).
#[cfg(feature = "mqtt")]
#[cfg_attr(docsrs, doc(cfg(feature = "mqtt")))]
pub mod mqtt {
    pub use hare_outbox_mqtt::*;
}

/// Kafka delivery (idempotent producer, acks=all) and the signal-topic wake-up.
#[cfg(feature = "kafka")]
#[cfg_attr(docsrs, doc(cfg(feature = "kafka")))]
pub mod kafka {
    pub use hare_outbox_kafka::*;
}

/// taskiq task delivery: task events for Python taskiq workers.
#[cfg(feature = "taskiq")]
#[cfg_attr(docsrs, doc(cfg(feature = "taskiq")))]
pub mod taskiq {
    pub use hare_outbox_taskiq::*;
}

/// Helpers for the tests of a service: what a handler enqueued, a delivery that records, a
/// relay drained in one call.
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use hare_outbox::sqlite::SqliteBackend;
/// use hare_outbox::testing::RecordingDelivery;
/// use hare_outbox::{Outbox, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig};
/// use serde_json::json;
///
/// let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
/// let outbox = Outbox::new(SqliteBackend::new(pool.clone()), OutboxTable::parse("outbox")?);
/// outbox.migrate().await?;
///
/// // The handler under test enqueues in its transaction …
/// let mut tx = outbox.wrap(pool.begin().await?);
/// tx.enqueue(OutboxMessage::new("orders.created", json!({"id": 7}))).await?;
///
/// // … and the test sees the event before the commit, on the same connection.
/// let event = outbox.assert_enqueued(&mut tx, "orders.created").await;
/// assert_eq!(event.payload, json!({"id": 7}));
/// assert_eq!(outbox.enqueued(&mut tx).await?.len(), 1);
/// tx.commit().await?;
///
/// // One call delivers everything due to a delivery that records what it got.
/// let delivery = RecordingDelivery::new();
/// let relay = OutboxRelay::new(outbox.clone(), delivery.clone(), RelayConfig::default())?;
/// assert_eq!(relay.drain_for_test().await?.delivered, 1);
/// assert_eq!(delivery.topics(), ["orders.created"]);
/// assert!(outbox.enqueued(&mut *pool.acquire().await?).await?.is_empty());
/// # Ok(()) }
/// # #[cfg(not(feature = "sqlite"))]
/// # fn main() {}
/// ```
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing {
    pub use hare_outbox_core::testing::*;
}

/// W3C trace context from the enqueuing span to the delivery and the consumer (see the module).
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod trace_context {
    pub use hare_outbox_core::trace_context::*;
}

/// The dashboard: the outbox as the journal of the system, as an axum `Router`.
#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
pub mod dashboard {
    pub use hare_outbox_dashboard::*;
}

/// The HTTP webhook delivery.
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub mod webhook {
    pub use hare_outbox_webhook::*;
}
