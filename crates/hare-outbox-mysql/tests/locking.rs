//! MySQL-specific locking: a writer of a key another transaction holds uncommitted waits for
//! it and gets the stored event (a key freed by a rollback is written); a deadlock is a retry.

use std::time::Duration;

use hare_outbox_core::{Outbox, OutboxMessage, OutboxTable};
use hare_outbox_mysql::MySqlBackend;
use hare_outbox_testkit::mysql::TestDatabase;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_of_a_key_waits_and_gets_the_committed_event() {
    let db = TestDatabase::new(4).await;
    let outbox = Outbox::new(
        MySqlBackend::new(db.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();

    let mut first = db.pool.begin().await.unwrap();
    let stored = outbox
        .enqueue(
            &mut *first,
            OutboxMessage::new("a", json!(1)).idempotency_key("k"),
        )
        .await
        .unwrap();
    let (second_outbox, pool) = (outbox.clone(), db.pool.clone());
    let second = tokio::spawn(async move {
        let mut tx = pool.begin().await.unwrap();
        let event = second_outbox
            .enqueue(
                &mut *tx,
                OutboxMessage::new("a", json!(2)).idempotency_key("k"),
            )
            .await
            .unwrap();
        tx.commit().await.unwrap();
        event
    });
    // The second writer waits on the key's unique index while the first is uncommitted.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "the second writer waits for the first"
    );
    first.commit().await.unwrap();
    let got = second.await.unwrap();
    assert_eq!(got.id, stored.id);
    assert_eq!(got.payload, json!(1));

    // A key whose writer rolls back is free again.
    let mut tx = db.pool.begin().await.unwrap();
    outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new("a", json!(3)).idempotency_key("r"),
        )
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let fresh = outbox
        .enqueue(
            &mut *conn,
            OutboxMessage::new("a", json!(4)).idempotency_key("r"),
        )
        .await
        .unwrap();
    assert_eq!(fresh.payload, json!(4));
    drop(conn);
    db.drop_database().await;
}

/// Two strict-order writers that take two keys' locks in opposite orders deadlock; InnoDB ends
/// one of them with 1213, which is `Error::TransactionRetry`, and the other commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_is_a_transaction_retry() {
    let db = TestDatabase::new(4).await;
    let outbox = Outbox::new(
        MySqlBackend::new(db.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    let strict = |key: &str| {
        OutboxMessage::new("a", json!(key))
            .ordering_key(key)
            .strict_order()
    };
    let mut one = db.pool.begin().await.unwrap();
    let mut two = db.pool.begin().await.unwrap();
    outbox.enqueue(&mut *one, strict("a")).await.unwrap();
    outbox.enqueue(&mut *two, strict("b")).await.unwrap();
    let first_outbox = outbox.clone();
    let waiting = tokio::spawn(async move {
        let result = first_outbox.enqueue(&mut *one, strict("b")).await;
        (result, one)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = outbox.enqueue(&mut *two, strict("a")).await;
    let (first, one) = waiting.await.unwrap();
    let outcomes = [first.map(drop), second.map(drop)];
    let retries = outcomes
        .iter()
        .filter(|r| matches!(r, Err(hare_outbox_core::Error::TransactionRetry { .. })))
        .count();
    assert_eq!(retries, 1, "{outcomes:?}");
    assert_eq!(
        outcomes.iter().filter(|r| r.is_ok()).count(),
        1,
        "{outcomes:?}"
    );
    drop((one, two));
    db.drop_database().await;
}

/// The MySQL 8 path (no `INSERT … RETURNING`: the rows are read back by id), run on whatever
/// server the tests use: single and multi-row inserts, stored and repeated keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserts_without_returning_read_their_rows_back() {
    let db = TestDatabase::new(4).await;
    let outbox = Outbox::new(
        MySqlBackend::new(db.pool.clone()).without_insert_returning(),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let one = outbox
        .enqueue(
            &mut *conn,
            OutboxMessage::new("a", json!({"n": 1})).idempotency_key("k1"),
        )
        .await
        .unwrap();
    assert!(one.sequence > 0);
    assert_eq!(one.payload, json!({"n": 1}));
    let many = outbox
        .enqueue_many(
            &mut *conn,
            vec![
                OutboxMessage::new("a", json!({"n": 2})).ordering_key("x"),
                OutboxMessage::new("a", json!({"n": 3})).idempotency_key("k1"),
                OutboxMessage::new("a", json!({"n": 4})).idempotency_key("k2"),
                OutboxMessage::new("a", json!({"n": 5})).idempotency_key("k2"),
            ],
        )
        .await
        .unwrap();
    let payloads: Vec<_> = many.iter().map(|e| e.payload["n"].clone()).collect();
    assert_eq!(payloads, [json!(2), json!(1), json!(4), json!(4)]);
    assert_eq!(many[1].id, one.id);
    assert_eq!(many[2].id, many[3].id);
    assert!(many[0].sequence > one.sequence && many[2].sequence > many[0].sequence);
    drop(conn);
    db.drop_database().await;
}
