//! An idempotency key committed after a REPEATABLE READ snapshot is `Error::TransactionRetry`,
//! and the retried transaction gets the stored event. (Foreign key, NOT NULL and CHECK violations
//! are in the shared suite: `conformance::hand_written`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{Error, Outbox, OutboxMessage, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::json;

async fn setup() -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(4).await;
    let table = OutboxTable::parse("outbox").unwrap();
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), table);
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

#[tokio::test]
async fn a_key_committed_after_the_snapshot_asks_for_a_retry_that_returns_the_stored_event() {
    let (schema, outbox) = setup().await;
    let mut tx = schema.pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await
        .unwrap();
    // The snapshot is taken by the first query.
    sqlx::query("SELECT count(*) FROM outbox")
        .execute(&mut *tx)
        .await
        .unwrap();
    let mut other = schema.pool.acquire().await.unwrap();
    let first = outbox
        .enqueue(
            &mut other,
            OutboxMessage::new("a", json!("first")).idempotency_key("K"),
        )
        .await
        .unwrap();
    drop(other);

    let e = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("a", json!("second")).idempotency_key("K"),
        )
        .await
        .unwrap_err();
    match &e {
        Error::TransactionRetry { message, .. } => {
            assert!(message.contains("serialize"), "{message}")
        }
        other => panic!("expected TransactionRetry, got {other:?}"),
    }
    tx.rollback().await.unwrap();

    // The retried transaction sees the committed key: the stored event, no error.
    let mut tx = schema.pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await
        .unwrap();
    let again = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("a", json!("second")).idempotency_key("K"),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(again.payload, json!("first"));
    schema.drop_schema().await;
}
