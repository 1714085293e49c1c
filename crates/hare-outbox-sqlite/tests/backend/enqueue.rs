//! Enqueue on SQLite beyond the shared suite: a locked database, the stored form of ids, JSON and
//! timestamps.

use std::time::Duration;

use hare_outbox_core::{Error, OutboxMessage};
use serde_json::json;
use sqlx::sqlite::SqlitePoolOptions;

use crate::common::{enqueue, setup};

#[tokio::test]
async fn a_locked_database_is_a_transaction_retry() {
    let (db, outbox) = setup("hare_outbox").await;
    let impatient = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(db.connect_options().busy_timeout(Duration::ZERO))
        .await
        .expect("pool without busy timeout");
    let mut conn = impatient.acquire().await.expect("acquire");
    let holder = db
        .pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .expect("hold the write lock");
    let error = outbox
        .enqueue(&mut conn, OutboxMessage::new("t", json!(1)))
        .await
        .expect_err("locked");
    assert!(matches!(error, Error::TransactionRetry { .. }), "{error:?}");
    holder.rollback().await.expect("release");
    outbox
        .enqueue(&mut conn, OutboxMessage::new("t", json!(1)))
        .await
        .expect("enqueue after release");
}

#[tokio::test]
async fn the_stored_form_is_uuid_text_json_text_and_fixed_width_utc_timestamps() {
    let (db, outbox) = setup("hare_outbox").await;
    let payload =
        json!({"name": "Zoë ✓", "items": [1, 2.5, null, {"deep": true}], "total": "12.50"});
    let event = enqueue(
        &outbox,
        OutboxMessage::new("orders.created", &payload)
            .header("author", "ann")
            .header("attempt", 3)
            .idempotency_key("k"),
    )
    .await;
    assert_eq!(event.payload, payload);
    assert_eq!(event.headers.get("author"), Some(&json!("ann")));
    assert_eq!(event.headers.get("attempt"), Some(&json!(3)));
    assert_eq!(event.idempotency_key.as_deref(), Some("k"));
    assert_eq!(event.ordering_key, None);
    let age = chrono::Utc::now() - event.created_at;
    assert!(
        age >= chrono::Duration::zero() && age < chrono::Duration::seconds(5),
        "{age}"
    );

    let (id, payload_text, headers_text, created_at): (String, String, String, String) =
        sqlx::query_as("SELECT id, payload, headers, created_at FROM hare_outbox")
            .fetch_one(&db.pool)
            .await
            .expect("raw row");
    assert_eq!(id, event.id.hyphenated().to_string());
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&payload_text).expect("payload is JSON"),
        payload
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&headers_text).expect("headers are JSON"),
        json!({"author": "ann", "attempt": 3})
    );
    assert_eq!(created_at.len(), 27, "{created_at}");
    assert_eq!(&created_at[10..11], "T");
    assert_eq!(&created_at[19..20], ".");
    assert!(created_at.ends_with('Z'), "{created_at}");
    assert_eq!(
        created_at,
        event
            .created_at
            .format("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string()
    );
}
