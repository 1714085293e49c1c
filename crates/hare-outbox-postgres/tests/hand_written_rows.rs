//! Rows another program wrote into the outbox with what the library never writes are
//! dead-lettered at lease time with the reason, never delivered, and hold back their key.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hare_outbox_core::{
    FnDelivery, Outbox, OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig,
};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::json;
use uuid::Uuid;

/// One hand-written row: id (`None` = NULL), topic, headers as JSON text, attempts, key.
struct Row {
    id: Option<Uuid>,
    topic: String,
    headers: &'static str,
    attempts: i32,
    key: &'static str,
    reason: String,
}

#[tokio::test]
async fn hand_written_rows_are_dead_lettered_with_the_reason_and_never_delivered() {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    // A table made by hand may be looser than the one `migrate` creates.
    sqlx::query("ALTER TABLE outbox ALTER COLUMN id DROP NOT NULL, ALTER COLUMN topic TYPE text")
        .execute(&schema.pool)
        .await
        .unwrap();
    let long_topic = "t".repeat(300);
    let rows = [
        Row {
            id: Some(Uuid::now_v7()),
            topic: "h.list".into(),
            headers: "[1,2]",
            attempts: 0,
            key: "k-list",
            reason: "invalid headers: [1,2] is not a JSON object".into(),
        },
        Row {
            id: Some(Uuid::now_v7()),
            topic: "h.text".into(),
            headers: "\"text\"",
            attempts: 0,
            key: "k-text",
            reason: "invalid headers: \"text\" is not a JSON object".into(),
        },
        Row {
            id: Some(Uuid::now_v7()),
            topic: "attempts".into(),
            headers: "{}",
            attempts: -20,
            key: "k-attempts",
            reason: "attempts -20 is negative".into(),
        },
        Row {
            id: Some(Uuid::nil()),
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
            id: Some(Uuid::now_v7()),
            topic: long_topic.clone(),
            headers: "{}",
            attempts: 0,
            key: "k-topic",
            reason: "topic of 300 characters is longer than 255".into(),
        },
    ];
    for row in &rows {
        sqlx::query(
            "INSERT INTO outbox (id, topic, payload, headers, attempts, ordering_key, created_at) \
             VALUES ($1, $2, '{}'::jsonb, $3::jsonb, $4, $5, now())",
        )
        .bind(row.id)
        .bind(&row.topic)
        .bind(row.headers)
        .bind(row.attempts)
        .bind(row.key)
        .execute(&schema.pool)
        .await
        .unwrap();
    }
    // Behind each hand-written row, a well-formed event of the same key; and one of no key.
    let mut tx = schema.pool.begin().await.unwrap();
    for row in &rows {
        outbox
            .enqueue(
                &mut *tx,
                OutboxMessage::new("behind", json!({"key": row.key})).ordering_key(row.key),
            )
            .await
            .unwrap();
    }
    outbox
        .enqueue(&mut *tx, OutboxMessage::new("fine", json!({})))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let delivered: Arc<Mutex<Vec<OutboxEvent>>> = Arc::default();
    let seen = delivered.clone();
    let delivery = FnDelivery::new(move |e: OutboxEvent| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(e);
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

    let topics: Vec<String> = delivered
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.topic.clone())
        .collect();
    assert_eq!(
        topics,
        ["fine"],
        "only the well-formed event of no held-back key goes out"
    );
    for row in &rows {
        let (dead, error): (bool, Option<String>) = sqlx::query_as(
            "SELECT dead_lettered_at IS NOT NULL, last_error FROM outbox WHERE topic = $1",
        )
        .bind(&row.topic)
        .fetch_one(&schema.pool)
        .await
        .unwrap();
        assert!(dead, "{} is not dead-lettered", row.reason);
        assert_eq!(error.as_deref(), Some(row.reason.as_str()));
        let (pending,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM outbox WHERE ordering_key = $1 AND topic = 'behind' \
             AND published_at IS NULL AND dead_lettered_at IS NULL",
        )
        .bind(row.key)
        .fetch_one(&schema.pool)
        .await
        .unwrap();
        assert_eq!(pending, 1, "the event behind {:?} is held back", row.reason);
    }
    schema.drop_schema().await;
}
