//! The consumer-side inbox on SQLite.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hare_outbox_core::inbox::{DEFAULT_INBOX_TABLE, Inbox};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use uuid::Uuid;

#[tokio::test]
async fn a_duplicate_is_skipped_a_rollback_forgotten_and_old_records_cleaned() {
    let db = TestDb::new(2).await;
    let inbox = Inbox::new(SqliteBackend::new(db.pool.clone()), DEFAULT_INBOX_TABLE).unwrap();
    inbox.migrate().await.unwrap();
    inbox.migrate().await.unwrap();
    let event = Uuid::now_v7();
    let mut tx = db.pool.begin().await.unwrap();
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
            .unwrap()
    );
    tx.rollback().await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    assert!(
        inbox
            .process_once(&mut *tx, "billing", event)
            .await
            .unwrap(),
        "the rollback recorded nothing"
    );
    assert!(
        inbox
            .process_once(&mut *tx, "shipping", event)
            .await
            .unwrap(),
        "consumers are independent"
    );
    tx.commit().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    assert!(
        !inbox
            .process_once(&mut conn, "billing", event)
            .await
            .unwrap(),
        "a redelivery is a duplicate"
    );
    sqlx::query("UPDATE hare_outbox_inbox SET processed_at = '2000-01-01T00:00:00.000000Z' WHERE consumer = 'shipping'")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    assert_eq!(inbox.cleanup(Duration::from_secs(86400)).await.unwrap(), 1);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM hare_outbox_inbox")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 1);
}
