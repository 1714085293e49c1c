//! Strict per-key commit order on PostgreSQL: writers of one ordering key that ask for it queue
//! up on a transaction-scoped lock, so sequence order is commit order for that key.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hare_outbox_core::{Outbox, OutboxMessage, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::{TestSchema, wait_until_blocked};
use serde_json::json;
use sqlx::PgConnection;

async fn setup(table: OutboxTable) -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(8).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), table);
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

async fn pid(conn: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
        .unwrap()
}

async fn committed(schema: &TestSchema) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT topic, sequence FROM outbox ORDER BY sequence", // test table, own schema
    )
    .fetch_all(&schema.pool)
    .await
    .unwrap()
}

/// Starts a second writer of `message` in its own transaction; returns its backend pid and the
/// task, which commits once the enqueue returns.
async fn second_writer(
    schema: &TestSchema,
    outbox: &Outbox<PgBackend>,
    message: OutboxMessage,
) -> (i32, tokio::task::JoinHandle<i64>) {
    let mut tx = schema.pool.begin().await.unwrap();
    let pid = pid(&mut tx).await;
    let outbox = outbox.clone();
    let task = tokio::spawn(async move {
        let event = outbox.enqueue(&mut tx, message).await.unwrap();
        tx.commit().await.unwrap();
        event.sequence
    });
    (pid, task)
}

#[tokio::test]
async fn strict_writers_of_one_key_commit_in_sequence_order() {
    let (schema, outbox) = setup(OutboxTable::parse("outbox").unwrap()).await;
    let mut first = schema.pool.begin().await.unwrap();
    let a = outbox
        .enqueue(
            &mut first,
            OutboxMessage::new("a", json!(1))
                .ordering_key("K")
                .strict_order(),
        )
        .await
        .unwrap();

    let (pid_b, b) = second_writer(
        &schema,
        &outbox,
        OutboxMessage::new("b", json!(2))
            .ordering_key("K")
            .strict_order(),
    )
    .await;
    // The second writer waits for the first one's transaction, having written nothing.
    wait_until_blocked(&schema.pool, pid_b).await;
    assert!(!b.is_finished());
    assert!(committed(&schema).await.is_empty());

    first.commit().await.unwrap();
    let b_sequence = tokio::time::timeout(Duration::from_secs(30), b)
        .await
        .expect("the second writer finishes once the first commits")
        .unwrap();
    assert!(b_sequence > a.sequence, "{b_sequence} after {}", a.sequence);
    assert_eq!(
        committed(&schema).await,
        vec![("a".to_owned(), a.sequence), ("b".to_owned(), b_sequence)]
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn without_strict_order_a_later_sequence_may_commit_first() {
    let (schema, outbox) = setup(OutboxTable::parse("outbox").unwrap()).await;
    let mut first = schema.pool.begin().await.unwrap();
    let a = outbox
        .enqueue(
            &mut first,
            OutboxMessage::new("a", json!(1)).ordering_key("K"),
        )
        .await
        .unwrap();
    let (_, b) = second_writer(
        &schema,
        &outbox,
        OutboxMessage::new("b", json!(2)).ordering_key("K"),
    )
    .await;
    // Nothing makes the second writer wait: it commits while the first is still open.
    let b_sequence = tokio::time::timeout(Duration::from_secs(30), b)
        .await
        .expect("a plain writer does not wait")
        .unwrap();
    assert!(b_sequence > a.sequence);
    assert_eq!(committed(&schema).await, vec![("b".to_owned(), b_sequence)]);
    first.commit().await.unwrap();
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_strict_table_orders_every_keyed_message_and_leaves_other_keys_alone() {
    let table = OutboxTable::parse("outbox")
        .unwrap()
        .with_strict_key_order(true);
    assert!(table.strict_key_order());
    let (schema, outbox) = setup(table).await;
    let mut first = schema.pool.begin().await.unwrap();
    let a = outbox
        .enqueue(
            &mut first,
            OutboxMessage::new("a", json!(1)).ordering_key("K"),
        )
        .await
        .unwrap();

    // Another key and no key at all never wait for the holder of K.
    for message in [
        OutboxMessage::new("other", json!(0)).ordering_key("L"),
        OutboxMessage::new("keyless", json!(0)),
    ] {
        let (_, task) = second_writer(&schema, &outbox, message).await;
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("writers of other keys do not wait")
            .unwrap();
    }

    let (pid_b, b) = second_writer(
        &schema,
        &outbox,
        OutboxMessage::new("b", json!(2)).ordering_key("K"),
    )
    .await;
    wait_until_blocked(&schema.pool, pid_b).await;
    first.commit().await.unwrap();
    let b_sequence = tokio::time::timeout(Duration::from_secs(30), b)
        .await
        .unwrap()
        .unwrap();
    assert!(b_sequence > a.sequence);
    schema.drop_schema().await;
}

#[tokio::test]
async fn enqueue_many_locks_its_strict_keys_and_a_plain_connection_waits_too() {
    let (schema, outbox) = setup(OutboxTable::parse("outbox").unwrap()).await;
    let mut first = schema.pool.begin().await.unwrap();
    let events = outbox
        .enqueue_many(
            &mut first,
            [
                OutboxMessage::new("a1", json!(1))
                    .ordering_key("L")
                    .strict_order(),
                OutboxMessage::new("a2", json!(2))
                    .ordering_key("K")
                    .strict_order(),
            ],
        )
        .await
        .unwrap();

    // A writer on a connection outside any transaction: enqueue holds the lock in a transaction
    // of its own, so it waits as well, and its event commits after the first.
    let mut plain = schema.pool.acquire().await.unwrap();
    let pid_b = pid(&mut plain).await;
    let writer = outbox.clone();
    let b = tokio::spawn(async move {
        writer
            .enqueue(
                &mut plain,
                OutboxMessage::new("b", json!(3))
                    .ordering_key("K")
                    .strict_order(),
            )
            .await
            .unwrap()
            .sequence
    });
    wait_until_blocked(&schema.pool, pid_b).await;
    assert!(committed(&schema).await.is_empty());
    first.commit().await.unwrap();
    let b_sequence = tokio::time::timeout(Duration::from_secs(30), b)
        .await
        .unwrap()
        .unwrap();
    assert!(b_sequence > events[1].sequence);
    assert_eq!(committed(&schema).await.len(), 3);
    schema.drop_schema().await;
}
