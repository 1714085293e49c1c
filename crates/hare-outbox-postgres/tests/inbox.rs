//! The consumer-side inbox on PostgreSQL beyond the shared suite: concurrent receivers of one
//! event serialized on the record's row lock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

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
