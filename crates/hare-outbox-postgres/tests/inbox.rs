//! The consumer-side inbox on PostgreSQL: duplicates skipped, rollbacks forgotten, concurrent
//! receivers serialized.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hare_outbox_core::Error;
use hare_outbox_core::inbox::{DEFAULT_INBOX_TABLE, Inbox};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use uuid::Uuid;

async fn setup() -> (TestSchema, Inbox<PgBackend>) {
    let schema = TestSchema::new(4).await;
    let inbox = Inbox::new(PgBackend::new(schema.pool.clone()), DEFAULT_INBOX_TABLE).unwrap();
    inbox.migrate().await.unwrap();
    inbox.migrate().await.unwrap();
    (schema, inbox)
}

#[tokio::test]
async fn a_duplicate_is_skipped_and_a_rollback_forgotten() {
    let (schema, inbox) = setup().await;
    let event = Uuid::now_v7();
    let mut tx = schema.pool.begin().await.unwrap();
    assert!(
        inbox
            .process_once(&mut *tx, "billing", event)
            .await
            .unwrap()
    );
    assert!(
        !inbox
            .process_once(&mut *tx, "billing", event)
            .await
            .unwrap(),
        "same transaction"
    );
    assert!(
        inbox
            .process_once(&mut *tx, "shipping", event)
            .await
            .unwrap(),
        "consumers are independent"
    );
    tx.rollback().await.unwrap();

    let mut tx = schema.pool.begin().await.unwrap();
    assert!(
        inbox
            .process_once(&mut *tx, "billing", event)
            .await
            .unwrap(),
        "the rollback recorded nothing"
    );
    tx.commit().await.unwrap();
    let mut tx = schema.pool.begin().await.unwrap();
    assert!(
        !inbox
            .process_once(&mut *tx, "billing", event)
            .await
            .unwrap(),
        "a redelivery is a duplicate"
    );
    tx.commit().await.unwrap();

    let mut conn = schema.pool.acquire().await.unwrap();
    let e = inbox.process_once(&mut conn, "", event).await.unwrap_err();
    assert!(matches!(e, Error::Validation { .. }), "{e}");
    drop(conn);
    assert!(
        inbox
            .schema_sql()
            .unwrap()
            .contains("PRIMARY KEY (consumer, event_id)")
    );
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_receivers_of_one_event_process_it_once() {
    let (schema, inbox) = setup().await;
    let event = Uuid::now_v7();
    let mut first = schema.pool.begin().await.unwrap();
    assert!(
        inbox
            .process_once(&mut *first, "billing", event)
            .await
            .unwrap()
    );
    let (pid_tx, pid_rx) = tokio::sync::oneshot::channel::<i32>();
    let second = {
        let (inbox, pool) = (inbox.clone(), schema.pool.clone());
        tokio::spawn(async move {
            let mut tx = pool.begin().await.unwrap();
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            pid_tx.send(pid).unwrap();
            let new = inbox
                .process_once(&mut *tx, "billing", event)
                .await
                .unwrap();
            tx.commit().await.unwrap();
            new
        })
    };
    hare_outbox_testkit::pg::wait_until_blocked(&schema.pool, pid_rx.await.unwrap()).await;
    first.commit().await.unwrap();
    assert!(!second.await.unwrap(), "the second sees the first's record");
    schema.drop_schema().await;
}

#[tokio::test]
async fn cleanup_deletes_old_records_in_batches() {
    let (schema, inbox) = setup().await;
    sqlx::query(
        "INSERT INTO hare_outbox_inbox (consumer, event_id, processed_at) \
         SELECT 'c', gen_random_uuid(), now() - interval '10 days' FROM generate_series(1, 2500)",
    )
    .execute(&schema.pool)
    .await
    .unwrap();
    let mut conn = schema.pool.acquire().await.unwrap();
    inbox
        .process_once(&mut conn, "c", Uuid::now_v7())
        .await
        .unwrap();
    drop(conn);
    assert_eq!(
        inbox.cleanup(Duration::from_secs(86400)).await.unwrap(),
        2500
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM hare_outbox_inbox")
        .fetch_one(&schema.pool)
        .await
        .unwrap();
    assert_eq!(left, 1);
    schema.drop_schema().await;
}
