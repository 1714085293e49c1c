//! The PostgreSQL backend beyond the shared suite, each test in a schema of its own: the
//! migrated table's columns and indexes, and a second writer of one idempotency key waiting on
//! the first's row lock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{Outbox, OutboxEvent, OutboxMessage, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::json;

async fn setup(table: &str) -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(8).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse(table).unwrap(),
    );
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

async fn count(schema: &TestSchema, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(&schema.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn migrate_is_idempotent_and_safe_concurrently() {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse(&format!("{}_x.events", schema.name)).unwrap(),
    );
    let (a, b) = tokio::join!(outbox.migrate(), outbox.migrate());
    a.unwrap();
    b.unwrap();
    outbox.migrate().await.unwrap();
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'events' ORDER BY ordinal_position",
    )
    .bind(format!("{}_x", schema.name))
    .fetch_all(&schema.pool)
    .await
    .unwrap();
    assert_eq!(columns, hare_outbox_core::capture::OUTBOX_OWNED_COLUMNS);
    let indexes = count(
        &schema,
        &format!(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = '{}_x' AND tablename = 'events'",
            schema.name
        ),
    )
    .await;
    assert_eq!(
        indexes, 8,
        "primary key, id, idempotency_key and five relay indexes"
    );
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{}_x\" CASCADE",
        schema.name
    )))
    .execute(&schema.pool)
    .await
    .unwrap();
    schema.drop_schema().await;
}

/// Enqueues `key` in a second transaction on its own task and returns once that insert waits for
/// the first transaction's uncommitted key; the task commits and yields the event it got.
async fn second_writer_blocked_on(
    schema: &TestSchema,
    outbox: &Outbox<PgBackend>,
    key: &'static str,
) -> tokio::task::JoinHandle<OutboxEvent> {
    let (outbox, pool) = (outbox.clone(), schema.pool.clone());
    let (pid_tx, pid_rx) = tokio::sync::oneshot::channel::<i32>();
    let task = tokio::spawn(async move {
        let mut tx2 = pool.begin().await.unwrap();
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *tx2)
            .await
            .unwrap();
        pid_tx.send(pid).unwrap();
        let e = outbox
            .enqueue(
                &mut *tx2,
                OutboxMessage::new("b", json!(2)).idempotency_key(key),
            )
            .await
            .unwrap();
        tx2.commit().await.unwrap();
        e
    });
    hare_outbox_testkit::pg::wait_until_blocked(&schema.pool, pid_rx.await.unwrap()).await;
    task
}

#[tokio::test]
async fn concurrent_transactions_with_one_key_wait_for_the_first() {
    let (schema, outbox) = setup("outbox").await;
    // The second waits and receives the first's event.
    let mut tx1 = schema.pool.begin().await.unwrap();
    let first = outbox
        .enqueue(
            &mut *tx1,
            OutboxMessage::new("a", json!(1)).idempotency_key("k"),
        )
        .await
        .unwrap();
    let second = second_writer_blocked_on(&schema, &outbox, "k").await;
    tx1.commit().await.unwrap();
    assert_eq!(second.await.unwrap(), first);

    // If the first rolls back, the second writes its own.
    let mut tx1 = schema.pool.begin().await.unwrap();
    outbox
        .enqueue(
            &mut *tx1,
            OutboxMessage::new("a", json!(1)).idempotency_key("k2"),
        )
        .await
        .unwrap();
    let second = second_writer_blocked_on(&schema, &outbox, "k2").await;
    tx1.rollback().await.unwrap();
    let own = second.await.unwrap();
    assert_eq!(own.topic, "b");
    assert_eq!(
        count(
            &schema,
            "SELECT count(*) FROM outbox WHERE idempotency_key = 'k2'"
        )
        .await,
        1
    );
    schema.drop_schema().await;
}
