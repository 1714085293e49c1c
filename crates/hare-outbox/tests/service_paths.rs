//! The paths a service takes: a transaction it began itself, wrapped so the relay is woken after
//! commit; a capture context outside a transaction refused; a relay run on a cloned handle.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{
    CancellationToken, Error, FnDelivery, InProcessWakeup, Outbox, OutboxMessage, OutboxRelay,
    OutboxTable, OutboxTransaction, RelayConfig, Wakeup,
};
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;

async fn setup() -> (TestDb, Outbox<SqliteBackend>, InProcessWakeup) {
    let db = TestDb::new(2).await;
    let wakeup = InProcessWakeup::new();
    let outbox = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    )
    .with_wakeup(wakeup.clone())
    .unwrap();
    outbox.migrate().await.unwrap();
    (db, outbox, wakeup)
}

#[tokio::test]
async fn a_wrapped_transaction_signals_after_commit_and_never_after_rollback() {
    let (db, outbox, wakeup) = setup().await;
    let mut signals = wakeup.subscribe().await.unwrap();

    // Rolled back: nothing is signalled, nothing stored.
    let mut tx = outbox.wrap(db.pool.begin().await.unwrap());
    tx.enqueue(OutboxMessage::new("orders.created", json!({"id": 1})))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(100), signals.recv())
            .await
            .is_err(),
        "a rollback signalled"
    );

    // The service's own transaction, wrapped: its own statements through `&mut *tx`, then one
    // signal naming the topics after COMMIT.
    let tx = db.pool.begin().await.unwrap();
    let mut tx = OutboxTransaction::from((outbox.clone(), tx));
    sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.enqueue(OutboxMessage::new("orders.created", json!({"id": 2})))
        .await
        .unwrap();
    tx.enqueue(OutboxMessage::new("orders.paid", json!({"id": 2})))
        .await
        .unwrap();
    assert_eq!(tx.pending_topics(), ["orders.created", "orders.paid"]);
    tx.commit().await.unwrap();
    let topics = tokio::time::timeout(Duration::from_secs(5), signals.recv())
        .await
        .expect("a signal after commit")
        .unwrap()
        .unwrap();
    assert_eq!(topics.to_vec(), ["orders.created", "orders.paid"]);
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, 2);
}

#[tokio::test]
async fn set_context_outside_a_transaction_is_refused_and_names_why() {
    let (db, outbox, _wakeup) = setup().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let error = outbox
        .set_context(&mut conn, json!({"author": "ann"}))
        .await
        .unwrap_err();
    match error {
        Error::Validation { field, message } => {
            assert_eq!(field, "conn");
            assert!(message.contains("transaction"), "{message}");
        }
        other => panic!("expected a validation error, got {other:?}"),
    }
    // Inside a transaction — a wrapped one included — it is accepted.
    let mut tx = outbox.wrap(db.pool.begin().await.unwrap());
    outbox
        .set_context(&mut tx, json!({"author": "ann"}))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn a_cloned_relay_runs_in_a_task_of_its_own_and_shares_its_counters() {
    let (db, outbox, _wakeup) = setup().await;
    let delivered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&delivered);
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |event| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(event.topic.clone());
                Ok(())
            }
        }),
        RelayConfig::default(),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let (relay, shutdown) = (relay.clone(), shutdown.clone());
        async move { relay.run(shutdown).await }
    });
    let mut tx = outbox.wrap(db.pool.begin().await.unwrap());
    tx.enqueue(OutboxMessage::new("orders.created", json!({"id": 3})))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // Woken by the commit, long before the 5 s poll interval.
    tokio::time::timeout(Duration::from_secs(3), async {
        while relay.stats().delivered < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("delivered after the wake-up");
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(*delivered.lock().unwrap(), ["orders.created"]);
}

#[tokio::test]
async fn a_bad_inbox_table_name_is_called_an_inbox_table() {
    let (db, _outbox, _wakeup) = setup().await;
    let error = hare_outbox::Inbox::new(SqliteBackend::new(db.pool.clone()), "a.b.c").unwrap_err();
    let message = error.to_string();
    assert!(message.contains("inbox table"), "{message}");
    assert!(!message.contains("outbox table"), "{message}");
}

#[cfg(feature = "testing")]
#[tokio::test]
#[should_panic(expected = "no event of topic \"orders.paid\" was enqueued")]
async fn assert_enqueued_names_the_topics_it_saw_when_the_topic_is_missing() {
    let (db, outbox, _wakeup) = setup().await;
    let mut tx = outbox.wrap(db.pool.begin().await.unwrap());
    tx.enqueue(OutboxMessage::new("orders.created", json!({"id": 1})))
        .await
        .unwrap();
    outbox.assert_enqueued(&mut tx, "orders.paid").await;
}
