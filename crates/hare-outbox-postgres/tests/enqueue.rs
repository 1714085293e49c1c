//! enqueue_many on PostgreSQL beyond the shared suite: row locks taken on idempotency keys in
//! crossing order deadlock, and the victim gets a retryable error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{Error, Outbox, OutboxMessage, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::json;

async fn setup(table: OutboxTable) -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(8).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), table);
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_enqueue_many_calls_deadlock_into_a_retryable_error() {
    let (schema, outbox) = setup(OutboxTable::parse("outbox").unwrap()).await;
    let mut tx1 = schema.pool.begin().await.unwrap();
    let mut tx2 = schema.pool.begin().await.unwrap();
    outbox
        .enqueue_many(
            &mut *tx1,
            vec![OutboxMessage::new("t", json!(1)).idempotency_key("A")],
        )
        .await
        .unwrap();
    outbox
        .enqueue_many(
            &mut *tx2,
            vec![OutboxMessage::new("t", json!(2)).idempotency_key("B")],
        )
        .await
        .unwrap();
    let o1 = outbox.clone();
    let first = tokio::spawn(async move {
        let r = o1
            .enqueue_many(
                &mut *tx1,
                vec![OutboxMessage::new("t", json!(3)).idempotency_key("B")],
            )
            .await;
        // The victim rolls back at once, as a caller would, so the other transaction goes on.
        if r.is_err() {
            tx1.rollback().await.unwrap();
        } else {
            tx1.commit().await.unwrap();
        }
        r
    });
    let o2 = outbox.clone();
    let second = tokio::spawn(async move {
        let r = o2
            .enqueue_many(
                &mut *tx2,
                vec![OutboxMessage::new("t", json!(4)).idempotency_key("A")],
            )
            .await;
        // The victim rolls back at once, as a caller would, so the other transaction goes on.
        if r.is_err() {
            tx2.rollback().await.unwrap();
        } else {
            tx2.commit().await.unwrap();
        }
        r
    });
    let r1 = first.await.unwrap();
    let r2 = second.await.unwrap();
    let errors: Vec<&Error> = [&r1, &r2]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "exactly one side is chosen as the deadlock victim: {r1:?} {r2:?}"
    );
    assert!(
        matches!(errors[0], Error::TransactionRetry { .. }),
        "{}",
        errors[0]
    );
    schema.drop_schema().await;
}
