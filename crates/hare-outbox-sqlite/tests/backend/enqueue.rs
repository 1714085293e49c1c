//! Enqueue: transactions, validation, idempotency, integrity, busy databases, the stored form,
//! several tables in one database.

use std::time::Duration;

use hare_outbox_core::{Error, OutboxMessage, OutboxRelay};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;
use sqlx::sqlite::SqlitePoolOptions;
use uuid::Uuid;

use crate::common::{config, count, drain, enqueue, message, outbox_on, recording, setup, stored};

#[tokio::test]
async fn an_event_commits_with_the_transaction_and_vanishes_with_its_rollback() {
    let (db, outbox) = setup("hare_outbox").await;
    sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY, total TEXT NOT NULL)")
        .execute(&db.pool)
        .await
        .expect("business table");

    let mut tx = db.pool.begin().await.expect("begin");
    sqlx::query("INSERT INTO orders (id, total) VALUES (1, '12.50')")
        .execute(&mut *tx)
        .await
        .expect("business write");
    let event = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("orders.created", json!({"id": 1, "total": "12.50"}))
                .ordering_key("order:1"),
        )
        .await
        .expect("enqueue");
    assert_eq!(
        outbox.get(event.id).await.expect("get"),
        None,
        "invisible before COMMIT"
    );
    tx.commit().await.expect("commit");
    assert_eq!(
        outbox.get(event.id).await.expect("get"),
        Some(event.clone())
    );
    assert_eq!(event.attempts, 0);
    assert_eq!(event.ordering_key.as_deref(), Some("order:1"));

    let mut tx = db.pool.begin().await.expect("begin");
    sqlx::query("INSERT INTO orders (id, total) VALUES (2, '3.00')")
        .execute(&mut *tx)
        .await
        .expect("business write");
    let lost = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("orders.created", json!({"id": 2})),
        )
        .await
        .expect("enqueue");
    tx.rollback().await.expect("rollback");
    assert_eq!(outbox.get(lost.id).await.expect("get"), None);
    assert_eq!(count(&db.pool, "hare_outbox").await, 1);
    assert_eq!(count(&db.pool, "orders").await, 1);
}

#[tokio::test]
async fn a_validation_error_writes_nothing() {
    let (db, outbox) = setup("hare_outbox").await;
    let mut conn = db.pool.acquire().await.expect("acquire");
    for bad in [
        OutboxMessage::new("", json!(1)),
        OutboxMessage::new("t", json!(1)).ordering_key("k".repeat(256)),
        OutboxMessage::new("t", vec![1.0, f64::NAN]),
        OutboxMessage::new("t", json!(1)).header("", "x"),
        OutboxMessage::new("t", json!(1))
            .id(Uuid::from_u128(0x0190_0000_0000_4000_8000_0000_0000_0001)),
    ] {
        let error = outbox.enqueue(&mut conn, bad).await.expect_err("refused");
        assert!(matches!(error, Error::Validation { .. }), "{error}");
    }
    assert_eq!(count(&db.pool, "hare_outbox").await, 0);
}

#[tokio::test]
async fn a_stored_idempotency_key_returns_the_stored_event_unchanged() {
    let (db, outbox) = setup("hare_outbox").await;
    let first = enqueue(
        &outbox,
        OutboxMessage::new("orders.created", json!({"v": 1})).idempotency_key("order:1:created"),
    )
    .await;
    let again = enqueue(
        &outbox,
        OutboxMessage::new("orders.other", json!({"v": 2}))
            .idempotency_key("order:1:created")
            .ordering_key("x"),
    )
    .await;
    assert_eq!(again, first);
    assert_eq!(again.topic, "orders.created");
    assert_eq!(again.payload, json!({"v": 1}));
    assert_eq!(count(&db.pool, "hare_outbox").await, 1);

    // Within one transaction, a key written earlier in it is found too.
    let mut tx = db.pool.begin().await.expect("begin");
    let inner = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("a", json!(1)).idempotency_key("k2"),
        )
        .await
        .expect("enqueue");
    let inner_again = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("b", json!(2)).idempotency_key("k2"),
        )
        .await
        .expect("enqueue again");
    assert_eq!(inner_again, inner);
    tx.commit().await.expect("commit");
    assert_eq!(count(&db.pool, "hare_outbox").await, 2);
}

#[tokio::test]
async fn a_key_freed_by_rollback_can_be_reused() {
    let (db, outbox) = setup("hare_outbox").await;
    let mut tx = db.pool.begin().await.expect("begin");
    let lost = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("t", json!({"try": 1})).idempotency_key("k"),
        )
        .await
        .expect("enqueue");
    tx.rollback().await.expect("rollback");

    let kept = enqueue(
        &outbox,
        OutboxMessage::new("t", json!({"try": 2})).idempotency_key("k"),
    )
    .await;
    assert_ne!(kept.id, lost.id);
    assert_eq!(kept.payload, json!({"try": 2}));
    assert_eq!(stored(&outbox, &kept).await, kept);
    assert_eq!(count(&db.pool, "hare_outbox").await, 1);
}

#[tokio::test]
async fn a_taken_explicit_id_is_an_integrity_error() {
    let (db, outbox) = setup("hare_outbox").await;
    let id = Uuid::now_v7();
    enqueue(&outbox, OutboxMessage::new("t", json!(1)).id(id)).await;
    let mut conn = db.pool.acquire().await.expect("acquire");
    let error = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(2))
                .id(id)
                .idempotency_key("fresh"),
        )
        .await
        .expect_err("duplicate id");
    assert!(matches!(error, Error::Integrity { .. }), "{error:?}");
    assert!(std::error::Error::source(&error).is_some());
    assert_eq!(count(&db.pool, "hare_outbox").await, 1);
}

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

#[tokio::test]
async fn two_outbox_tables_in_one_database_do_not_see_each_other() {
    let db = TestDb::new(4).await;
    let orders = outbox_on(&db.pool, "orders_outbox").await;
    let billing = outbox_on(&db.pool, "billing_outbox").await;
    let order_event = enqueue(
        &orders,
        message("orders.created", Some("k"), 1).idempotency_key("same"),
    )
    .await;
    // The same idempotency key is a separate event in another table.
    let billing_event = enqueue(
        &billing,
        message("invoice.paid", Some("k"), 1).idempotency_key("same"),
    )
    .await;
    assert_ne!(order_event.id, billing_event.id);
    assert_eq!(billing.get(order_event.id).await.expect("get"), None);
    assert_eq!(orders.get(billing_event.id).await.expect("get"), None);

    let (seen, delivery) = recording();
    let relay = OutboxRelay::<SqliteBackend>::new(orders.clone(), delivery, config("orders-relay"))
        .expect("relay");
    let outcome = relay.poll_once().await.expect("poll");
    assert_eq!(outcome.delivered, 1);
    let delivered: Vec<Uuid> = drain(&seen).iter().map(|e| e.id).collect();
    assert_eq!(delivered, [order_event.id]);
    assert!(stored(&orders, &order_event).await.published_at.is_some());
    let untouched = stored(&billing, &billing_event).await;
    assert_eq!(
        untouched, billing_event,
        "the other table's event is untouched"
    );
    assert_eq!(relay.poll_once().await.expect("poll").leased, 0);
}
