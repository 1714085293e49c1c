//! Shared helpers: an outbox on a fresh file, a recording delivery, raw row reads.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hare_outbox_core::{
    DeliveryError, FnDelivery, Outbox, OutboxEvent, OutboxMessage, OutboxTable, RelayConfig,
};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;
use sqlx::{AssertSqlSafe, SqlitePool};

/// The columns of an outbox table, in order (DESIGN §4).
pub const COLUMNS: [&str; 15] = [
    "sequence",
    "id",
    "topic",
    "payload",
    "headers",
    "ordering_key",
    "idempotency_key",
    "created_at",
    "attempts",
    "last_error",
    "next_attempt_at",
    "lease_until",
    "leased_by",
    "published_at",
    "dead_lettered_at",
];

/// A fresh database file and a migrated outbox in `table` on it.
pub async fn setup(table: &str) -> (TestDb, Outbox<SqliteBackend>) {
    let db = TestDb::new(4).await;
    let outbox = outbox_on(&db.pool, table).await;
    (db, outbox)
}

/// A migrated outbox in `table` on `pool`.
pub async fn outbox_on(pool: &SqlitePool, table: &str) -> Outbox<SqliteBackend> {
    let outbox = Outbox::new(
        SqliteBackend::new(pool.clone()),
        OutboxTable::parse(table).expect("valid table name"),
    );
    outbox.migrate().await.expect("migrate");
    outbox
}

/// Enqueues `message` on a connection of the outbox's own pool, outside a transaction.
pub async fn enqueue(outbox: &Outbox<SqliteBackend>, message: OutboxMessage) -> OutboxEvent {
    let mut conn = outbox.backend().pool().acquire().await.expect("acquire");
    outbox.enqueue(&mut conn, message).await.expect("enqueue")
}

/// An event on `topic` with `key` as ordering key (none for `None`).
pub fn message(topic: &str, key: Option<&str>, n: i64) -> OutboxMessage {
    let message = OutboxMessage::new(topic, json!({"n": n}));
    match key {
        Some(key) => message.ordering_key(key),
        None => message,
    }
}

/// Reads the event back; it must exist.
pub async fn stored(outbox: &Outbox<SqliteBackend>, event: &OutboxEvent) -> OutboxEvent {
    outbox
        .get(event.id)
        .await
        .expect("get")
        .expect("event exists")
}

/// Rows in `table`.
pub async fn count(pool: &SqlitePool, table: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(pool)
        .await
        .expect("count rows")
}

/// What a recording delivery has been given, in the order the calls started.
pub type Seen = Arc<Mutex<Vec<OutboxEvent>>>;

/// A delivery that records every event and refuses those on topic `poison`.
pub fn recording() -> (Seen, impl hare_outbox_core::Delivery) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let delivery = FnDelivery::new(move |event: OutboxEvent| {
        let record = record.clone();
        async move {
            let poison = event.topic == "poison";
            record.lock().expect("recorder lock").push(event);
            if poison {
                return Err(DeliveryError::new("refused: poison"));
            }
            Ok(())
        }
    });
    (seen, delivery)
}

/// Takes what the recorder holds.
pub fn drain(seen: &Seen) -> Vec<OutboxEvent> {
    std::mem::take(&mut *seen.lock().expect("recorder lock"))
}

/// A relay configuration for tests: named `name`, polling every 20 ms.
pub fn config(name: &str) -> RelayConfig {
    RelayConfig::default()
        .with_name(name)
        .with_poll_interval(Duration::from_millis(20))
}
