//! SQLite: foreign-key, NOT NULL and CHECK violations of the outbox row are `Error::Integrity`
//! with SQLite's message (the column of a NOT NULL, the name of a CHECK); nothing is written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{ColumnType, Error, ExtraColumn, Outbox, OutboxMessage, OutboxTable};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;
use sqlx::AssertSqlSafe;

fn integrity(e: Error) -> String {
    match e {
        Error::Integrity { message, .. } => message,
        other => panic!("expected an integrity error, got {other:?}"),
    }
}

#[tokio::test]
async fn foreign_key_not_null_and_check_violations_are_integrity_errors() {
    let db = TestDb::new(2).await;
    sqlx::raw_sql("CREATE TABLE tenants (id INTEGER PRIMARY KEY); INSERT INTO tenants VALUES (1);")
        .execute(&db.pool)
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
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), table);
    // The table as a user's own migration may have tightened it: note NOT NULL, and short.
    let ddl = outbox.schema_sql();
    let tightened = ddl.replacen(
        "\"note\" TEXT",
        "\"note\" TEXT NOT NULL CONSTRAINT note_short CHECK (length(\"note\") < 5)",
        1,
    );
    assert_ne!(ddl, tightened, "{ddl}");
    sqlx::raw_sql(AssertSqlSafe(tightened))
        .execute(&db.pool)
        .await
        .unwrap();
    outbox.migrate().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();

    let message = integrity(
        outbox
            .enqueue(
                &mut conn,
                OutboxMessage::new("a", json!(1))
                    .extra("tenant_id", 99i64)
                    .extra("note", "n"),
            )
            .await
            .unwrap_err(),
    );
    assert!(message.contains("FOREIGN KEY"), "{message}");

    let message = integrity(
        outbox
            .enqueue(&mut conn, OutboxMessage::new("a", json!(1)))
            .await
            .unwrap_err(),
    );
    assert!(
        message.contains("NOT NULL") && message.contains("note"),
        "{message}"
    );

    let message = integrity(
        outbox
            .enqueue_many(
                &mut conn,
                [OutboxMessage::new("a", json!(1)).extra("note", "too long")],
            )
            .await
            .unwrap_err(),
    );
    assert!(message.contains("note_short"), "{message}");

    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(count, 0, "nothing written");
}
