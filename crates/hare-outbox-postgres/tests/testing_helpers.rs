//! The test helpers of the `testing` feature on PostgreSQL: what a transaction enqueued is seen
//! on its connection before the commit (and not on another), and a drained relay leaves nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::testing::RecordingDelivery;
use hare_outbox_core::{Outbox, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::json;

#[tokio::test]
async fn enqueued_events_are_seen_on_the_transaction_then_drained() {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();

    let mut tx = outbox.wrap(schema.pool.begin().await.unwrap());
    tx.enqueue(OutboxMessage::new("orders.created", json!({"id": 1})))
        .await
        .unwrap();
    tx.enqueue_many([
        OutboxMessage::new("orders.paid", json!({"id": 1})),
        OutboxMessage::new("orders.created", json!({"id": 2})),
    ])
    .await
    .unwrap();
    let seen: Vec<String> = outbox
        .enqueued(&mut tx)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.topic)
        .collect();
    assert_eq!(seen, ["orders.created", "orders.paid", "orders.created"]);
    // The newest of its topic.
    let created = outbox.assert_enqueued(&mut tx, "orders.created").await;
    assert_eq!(created.payload, json!({"id": 2}));
    // Uncommitted: another connection sees nothing.
    let mut other = schema.pool.acquire().await.unwrap();
    assert!(outbox.enqueued(&mut other).await.unwrap().is_empty());
    tx.commit().await.unwrap();
    assert_eq!(outbox.enqueued(&mut other).await.unwrap().len(), 3);

    let delivery = RecordingDelivery::new();
    let relay = OutboxRelay::new(
        outbox.clone(),
        delivery.clone(),
        RelayConfig::default().with_batch_size(1),
    )
    .unwrap();
    let drained = relay.drain_for_test().await.unwrap();
    assert_eq!(drained.delivered, 3, "{drained:?}");
    assert_eq!(
        delivery.topics(),
        ["orders.created", "orders.paid", "orders.created"]
    );
    assert!(outbox.enqueued(&mut other).await.unwrap().is_empty());
}
