//! Strict per-key commit order on SQLite: one writer at a time already commits in sequence order,
//! so strict messages are written as any other; strict order without a key is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{Error, Outbox, OutboxMessage, OutboxTable};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;

#[tokio::test]
async fn strict_messages_are_written_in_sequence_order() {
    let db = TestDb::new(2).await;
    let table = OutboxTable::parse("outbox")
        .unwrap()
        .with_strict_key_order(true);
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), table);
    outbox.migrate().await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let a = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("a", json!(1))
                .ordering_key("K")
                .strict_order(),
        )
        .await
        .unwrap();
    let many = outbox
        .enqueue_many(
            &mut tx,
            [
                OutboxMessage::new("b", json!(2)).ordering_key("K"),
                OutboxMessage::new("c", json!(3)),
            ],
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(a.sequence < many[0].sequence && many[0].sequence < many[1].sequence);

    let mut conn = db.pool.acquire().await.unwrap();
    let error = outbox
        .enqueue(&mut conn, OutboxMessage::new("d", json!(4)).strict_order())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Validation { field, .. } if field == "ordering_key"),
        "{error:?}"
    );
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(count, 3, "the refused message wrote nothing");
}
