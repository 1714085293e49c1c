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
//! // The event commits (or rolls back) with the business write.
//! let mut tx = pool.begin().await?;
//! sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT)").execute(&mut *tx).await?;
//! sqlx::query("INSERT INTO orders VALUES (22, 'confirmed')").execute(&mut *tx).await?;
//! outbox
//!     .enqueue(
//!         &mut *tx,
//!         OutboxMessage::new("sales.order.confirmed", json!({"id": 22})).ordering_key("sales_order:22"),
//!     )
//!     .await?;
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
//! | `mysql` | [`mysql::MySqlBackend`]: MySQL ≥ 8.0 and MariaDB ≥ 10.6, `FOR UPDATE SKIP LOCKED` leases (no change capture yet) |
//! | `webhook` | [`webhook::WebhookDelivery`]: HTTP POST with HMAC-SHA256 signatures, per-event targets, `allows_url`, attempt records |
//! | `redis` | [`redis::RedisStreamsDelivery`] (XADD, one pipeline per batch) and [`redis::RedisWakeup`] |
//! | `rabbitmq` | [`rabbitmq::RabbitMqDelivery`] (persistent, publisher confirms) and [`rabbitmq::RabbitMqWakeup`] |
//! | `kafka` | [`kafka::KafkaDelivery`] (idempotent, acks=all, key = ordering key) and [`kafka::KafkaWakeup`] |
//! | `mqtt` | [`mqtt::MqttDelivery`]: QoS 1, topic dots mapped to slashes |
//! | `nats` | [`nats::NatsDelivery`] (JetStream, `Nats-Msg-Id` dedup) and [`nats::NatsWakeup`] |
//! | `taskiq` | [`taskiq::TaskiqDelivery`]: task events executed by Python taskiq workers (Redis list broker; RabbitMQ too with `rabbitmq`) |

#![cfg_attr(docsrs, feature(doc_cfg))]

// The user API, item by item (the backend seam is in `backend`, not here).
pub use hare_outbox_core::{
    Backlog, BreakerConfig, BreakerState, CONCURRENCY_RANGE, CancellationToken, CaptureStatus,
    ChangeCapture, ChangePayload, CleanupOutcome, ColumnType, Delivery, DeliveryError,
    DeliveryErrorKind, DeliveryReport, Destination, DestinationSpec, DestinationStatus,
    Destinations, EVENT_ID_HEADER, Error, EventPage, EventQuery, EventStatus, ExtraColumn,
    ExtraValue, FinishedState, FnDelivery, IdempotencyScope, InProcessWakeup, Inbox, Journal,
    JsonLinesDelivery, MAX_KEY_CHARS, MIN_DELIVERY_TIMEOUT, MIN_LEASE, MIN_POLL_INTERVAL,
    MigrationStatus, MigrationStream, Outbox, OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable,
    OutboxTransaction, PollOutcome, RelayConfig, RelayEvent, RelayObserver, RelayStats, Result,
    RowOperation, StoredRow, TOPIC_HEADER, TopicFilter, TopicPattern, TopicRouter, Wakeup,
    WakeupSubscription,
};
pub use hare_outbox_core::{
    BoxError, capture, delivery, error, event, extra, inbox, journal, json, message, migration,
    redact, relay, table, topic, wakeup,
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

/// The HTTP webhook delivery.
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub mod webhook {
    pub use hare_outbox_webhook::*;
}
