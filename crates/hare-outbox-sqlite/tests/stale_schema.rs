//! A connection that last read the outbox before another process's `migrate` added an extra
//! column still reads the column's value: SQLite would take a double-quoted name it does not
//! know (yet) as a string literal, so column reads are quoted as identifiers only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{ColumnType, ExtraColumn, Outbox, OutboxMessage, OutboxTable};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;

#[tokio::test]
async fn a_column_added_by_another_connection_is_read_not_taken_for_its_name() {
    let db = TestDb::new(1).await;
    let before = Outbox::new(SqliteBackend::new(db.pool.clone()), OutboxTable::default());
    before.migrate().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let old = before
        .enqueue(&mut conn, OutboxMessage::new("t", json!(1)))
        .await
        .unwrap();
    drop(conn);
    // The one connection of `db.pool` has now cached the schema without `tenant_id`.
    assert!(before.get(old.id).await.unwrap().is_some());

    let table = OutboxTable::default()
        .with_column(ExtraColumn::new("tenant_id", ColumnType::Text).unwrap())
        .unwrap();
    let other = db.connect(1).await;
    Outbox::new(SqliteBackend::new(other.clone()), table.clone())
        .migrate()
        .await
        .unwrap();
    sqlx::query("UPDATE hare_outbox SET tenant_id = 'acme'")
        .execute(&other)
        .await
        .unwrap();

    let after = Outbox::new(SqliteBackend::new(db.pool.clone()), table);
    let read = after.get(old.id).await.unwrap().unwrap();
    assert_eq!(read.extra["tenant_id"], json!("acme"));
}
