//! Shared helpers: an outbox on a fresh file, raw row reads.

use hare_outbox_core::{Outbox, OutboxEvent, OutboxMessage, OutboxTable};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;
use sqlx::{AssertSqlSafe, SqlitePool};

/// The columns of an outbox table, in order.
pub const COLUMNS: &[&str] = hare_outbox_core::capture::OUTBOX_OWNED_COLUMNS;

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

/// Rows in `table`.
pub async fn count(pool: &SqlitePool, table: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(pool)
        .await
        .expect("count rows")
}
