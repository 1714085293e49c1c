//! Integrity violations of the outbox row — foreign key, NOT NULL, CHECK — are
//! `Error::Integrity` naming the constraint; an idempotency key committed after a REPEATABLE READ
//! snapshot is `Error::TransactionRetry`, and the retried transaction gets the stored event.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{ColumnType, Error, ExtraColumn, Outbox, OutboxMessage, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::json;
use sqlx::AssertSqlSafe;

async fn setup() -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(4).await;
    sqlx::raw_sql("CREATE TABLE tenants (id bigint PRIMARY KEY); INSERT INTO tenants VALUES (1);")
        .execute(&schema.pool)
        .await
        .unwrap();
    let table = OutboxTable::parse("outbox")
        .unwrap()
        .with_column(
            ExtraColumn::new("tenant_id", ColumnType::BigInt)
                .unwrap()
                .references("tenants", "id")
                .unwrap(),
        )
        .unwrap()
        .with_column(ExtraColumn::new("note", ColumnType::Text).unwrap())
        .unwrap();
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), table);
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

async fn exec(schema: &TestSchema, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&schema.pool)
        .await
        .unwrap();
}

fn integrity(e: Error) -> String {
    match e {
        Error::Integrity { message, .. } => message,
        other => panic!("expected an integrity error, got {other:?}"),
    }
}

async fn stored(schema: &TestSchema) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox")
        .fetch_one(&schema.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn foreign_key_not_null_and_check_violations_name_their_constraint() {
    let (schema, outbox) = setup().await;
    exec(
        &schema,
        "ALTER TABLE outbox ADD CONSTRAINT outbox_topic_prefix CHECK (topic LIKE 'app.%');
         ALTER TABLE outbox ALTER COLUMN note SET NOT NULL;",
    )
    .await;
    let fk: String = sqlx::query_scalar(
        "SELECT conname::text FROM pg_constraint WHERE conrelid = 'outbox'::regclass AND contype = 'f'",
    )
    .fetch_one(&schema.pool)
    .await
    .unwrap();
    let mut conn = schema.pool.acquire().await.unwrap();

    let message = integrity(
        outbox
            .enqueue(
                &mut conn,
                OutboxMessage::new("app.a", json!(1))
                    .extra("tenant_id", 99i64)
                    .extra("note", "n"),
            )
            .await
            .unwrap_err(),
    );
    assert!(message.contains(&fk), "{message}");

    let message = integrity(
        outbox
            .enqueue(
                &mut conn,
                OutboxMessage::new("app.a", json!(1)).extra("tenant_id", 1i64),
            )
            .await
            .unwrap_err(),
    );
    assert!(message.contains("\"note\""), "{message}");

    let message = integrity(
        outbox
            .enqueue_many(
                &mut conn,
                [OutboxMessage::new("other.a", json!(1)).extra("note", "n")],
            )
            .await
            .unwrap_err(),
    );
    assert!(message.contains("outbox_topic_prefix"), "{message}");

    assert_eq!(stored(&schema).await, 0, "nothing written");
    outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("app.a", json!(1))
                .extra("tenant_id", 1i64)
                .extra("note", "n"),
        )
        .await
        .unwrap();
    assert_eq!(stored(&schema).await, 1);
    drop(conn);
    schema.drop_schema().await;
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
