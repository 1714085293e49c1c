//! Rows another program wrote into the outbox with what the library never writes are
//! dead-lettered at lease time with the reason, never delivered, and hold back their key.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hare_outbox_core::{
    FnDelivery, Outbox, OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig,
};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;
use uuid::Uuid;

/// One hand-written row: id (`None` = NULL), topic, headers, attempts, key, and the reason
/// it is refused with.
struct Row {
    id: Option<String>,
    topic: String,
    headers: &'static str,
    attempts: i64,
    key: &'static str,
    reason: String,
}

#[tokio::test]
async fn hand_written_rows_are_dead_lettered_with_the_reason_and_never_delivered() {
    let db = TestDb::new(4).await;
    // A table made by hand, with an id that may be NULL; `migrate` keeps it and adds indexes.
    sqlx::query(
        "CREATE TABLE outbox (sequence INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, \
         topic TEXT NOT NULL, payload TEXT NOT NULL, headers TEXT NOT NULL DEFAULT '{}', \
         ordering_key TEXT, idempotency_key TEXT UNIQUE, created_at TEXT NOT NULL, \
         attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT, next_attempt_at TEXT, \
         lease_until TEXT, leased_by TEXT, published_at TEXT, dead_lettered_at TEXT)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let outbox = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    let new_id = || Some(Uuid::now_v7().to_string());
    let rows = [
        Row {
            id: new_id(),
            topic: "h.list".into(),
            headers: "[1,2]",
            attempts: 0,
            key: "k-list",
            reason: "invalid headers: [1,2] is not a JSON object".into(),
        },
        Row {
            id: new_id(),
            topic: "h.text".into(),
            headers: "\"text\"",
            attempts: 0,
            key: "k-text",
            reason: "invalid headers: \"text\" is not a JSON object".into(),
        },
        Row {
            id: new_id(),
            topic: "h.empty".into(),
            headers: "{\"\": \"x\"}",
            attempts: 0,
            key: "k-empty",
            reason: "invalid headers: a header name is empty".into(),
        },
        Row {
            id: new_id(),
            topic: "attempts".into(),
            headers: "{}",
            attempts: -20,
            key: "k-attempts",
            reason: "attempts -20 is negative".into(),
        },
        Row {
            id: Some(Uuid::nil().to_string()),
            topic: "nil.id".into(),
            headers: "{}",
            attempts: 0,
            key: "k-nil",
            reason: "id is the nil UUID 00000000-0000-0000-0000-000000000000".into(),
        },
        Row {
            id: None,
            topic: "null.id".into(),
            headers: "{}",
            attempts: 0,
            key: "k-null",
            reason: "id is NULL".into(),
        },
        Row {
            id: new_id(),
            topic: "t".repeat(300),
            headers: "{}",
            attempts: 0,
            key: "k-topic",
            reason: "topic of 300 characters is longer than 255".into(),
        },
    ];
    for row in &rows {
        sqlx::query(
            "INSERT INTO outbox (id, topic, payload, headers, attempts, ordering_key, created_at) \
             VALUES (?, ?, '{}', ?, ?, ?, '2026-01-01T00:00:00.000000Z')",
        )
        .bind(&row.id)
        .bind(&row.topic)
        .bind(row.headers)
        .bind(row.attempts)
        .bind(row.key)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    // Behind each hand-written row, a well-formed event of the same key; and one of no key.
    let mut tx = db.pool.begin().await.unwrap();
    for row in &rows {
        outbox
            .enqueue(
                &mut tx,
                OutboxMessage::new("behind", json!({"key": row.key})).ordering_key(row.key),
            )
            .await
            .unwrap();
    }
    outbox
        .enqueue(&mut tx, OutboxMessage::new("fine", json!({})))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let delivered: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = delivered.clone();
    let delivery = FnDelivery::new(move |e: OutboxEvent| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(e.topic);
            Ok(())
        }
    });
    let config = RelayConfig::default()
        .with_poll_interval(Duration::from_millis(20))
        .with_max_delivery_attempts(3);
    let relay = OutboxRelay::new(outbox.clone(), delivery, config).unwrap();
    for _ in 0..3 {
        relay
            .poll_once()
            .await
            .expect("a hand-written row does not fail the poll");
    }

    assert_eq!(
        *delivered.lock().unwrap(),
        ["fine"],
        "only the well-formed event of no held-back key goes out"
    );
    for row in &rows {
        let (dead, error): (bool, Option<String>) = sqlx::query_as(
            "SELECT dead_lettered_at IS NOT NULL, last_error FROM outbox WHERE topic = ?",
        )
        .bind(&row.topic)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(dead, "{} is not dead-lettered", row.reason);
        assert_eq!(error.as_deref(), Some(row.reason.as_str()));
        let (pending,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM outbox WHERE ordering_key = ? AND topic = 'behind' \
             AND published_at IS NULL AND dead_lettered_at IS NULL",
        )
        .bind(row.key)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(pending, 1, "the event behind {:?} is held back", row.reason);
    }
    db.close().await;
}
