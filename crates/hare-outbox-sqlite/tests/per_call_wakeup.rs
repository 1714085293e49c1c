//! A wake-up given to one enqueue call (seed 001 § enqueue(), `wakeup=`): signalled after the
//! commit with the topics written through it, not the outbox's own wake-up, nothing after a
//! rollback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use hare_outbox_core::{InProcessWakeup, Outbox, OutboxMessage, OutboxTable, Wakeup};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::next_topics;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_per_call_wakeup_is_signalled_after_commit_instead_of_the_outbox_one() {
    let db = TestDb::new(2).await;
    let own = InProcessWakeup::new();
    let outbox = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    )
    .with_wakeup(own.clone())
    .unwrap();
    outbox.migrate().await.unwrap();
    let per_call = InProcessWakeup::new();
    let shared: Arc<dyn Wakeup> = Arc::new(per_call.clone());
    let mut own_sub = own.subscribe().await.unwrap();
    let mut call_sub = per_call.subscribe().await.unwrap();

    // Rolled back: nothing is signalled.
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_with(OutboxMessage::new("rolled.back", json!(0)), shared.clone())
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_with(OutboxMessage::new("billing.paid", json!(1)), shared.clone())
        .await
        .unwrap();
    tx.enqueue_many_with(
        [
            OutboxMessage::new("billing.refunded", json!(2)),
            OutboxMessage::new("billing.paid", json!(3)),
        ],
        shared.clone(),
    )
    .await
    .unwrap();
    tx.enqueue(OutboxMessage::new("orders.created", json!(4)))
        .await
        .unwrap();
    assert_eq!(tx.pending_topics(), ["orders.created"]);
    tx.commit().await.unwrap();

    // The first signal of each: the rolled-back write sent none.
    assert_eq!(
        next_topics(&mut call_sub, WAIT).await,
        ["billing.paid", "billing.refunded"]
    );
    assert_eq!(next_topics(&mut own_sub, WAIT).await, ["orders.created"]);
}
