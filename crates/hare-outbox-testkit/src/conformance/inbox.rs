//! The consumer-side inbox on any backend: a duplicate is skipped, a rollback forgotten,
//! consumers are independent, and old records are cleaned up in batches.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hare_outbox_core::inbox::{DEFAULT_INBOX_TABLE, Inbox};
use hare_outbox_core::{Backend, Error};
use uuid::Uuid;

use super::harness::{Cell, Harness, days_ago, plain};

/// An inbox in the default table, migrated twice.
async fn inbox<H: Harness>(h: &H) -> Inbox<H::Backend> {
    let inbox = Inbox::new(h.backend(), DEFAULT_INBOX_TABLE).unwrap();
    inbox.migrate().await.unwrap();
    inbox.migrate().await.unwrap();
    inbox
}

/// The first `process_once` of an event by a consumer is new, a second (same transaction or a
/// later redelivery) a duplicate; another consumer is independent; a rolled-back record is
/// forgotten; an empty consumer name is a validation error; the table's key is
/// (consumer, event id).
pub async fn a_duplicate_is_skipped_and_a_rollback_forgotten<H: Harness>(h: &H) {
    let inbox = inbox(h).await;
    let backend = h.backend();
    let event = Uuid::now_v7();
    let mut tx = backend.begin().await.unwrap();
    assert!(inbox.process_once(&mut tx, "billing", event).await.unwrap());
    assert!(
        !inbox.process_once(&mut tx, "billing", event).await.unwrap(),
        "same transaction"
    );
    assert!(
        inbox
            .process_once(&mut tx, "shipping", event)
            .await
            .unwrap(),
        "consumers are independent"
    );
    backend.rollback(tx).await.unwrap();

    let mut tx = backend.begin().await.unwrap();
    assert!(
        inbox.process_once(&mut tx, "billing", event).await.unwrap(),
        "the rollback recorded nothing"
    );
    backend.commit(tx).await.unwrap();
    let mut conn = h.acquire().await;
    assert!(
        !inbox
            .process_once(&mut conn, "billing", event)
            .await
            .unwrap(),
        "a redelivery is a duplicate"
    );
    let e = inbox.process_once(&mut conn, "", event).await.unwrap_err();
    assert!(matches!(e, Error::Validation { .. }), "{e}");
    assert!(
        inbox
            .schema_sql()
            .contains("PRIMARY KEY (consumer, event_id)")
    );
    assert_eq!(h.scalar("SELECT count(*) FROM hare_outbox_inbox").await, 1);
}

/// 2,500 records ten days old are deleted by one clean-up of records older than a day (in
/// batches); the fresh record stays.
pub async fn cleanup_deletes_old_records_in_batches<H: Harness>(h: &H) {
    let inbox = inbox(h).await;
    let backend = h.backend();
    let mut tx = backend.begin().await.unwrap();
    for _ in 0..2500 {
        assert!(
            inbox
                .process_once(&mut tx, "c", Uuid::now_v7())
                .await
                .unwrap()
        );
    }
    backend.commit(tx).await.unwrap();
    h.update(
        &plain(DEFAULT_INBOX_TABLE),
        "consumer = 'c'",
        &[("processed_at", Cell::Time(Some(days_ago(10))))],
    )
    .await;
    let mut conn = h.acquire().await;
    inbox
        .process_once(&mut conn, "c", Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(
        inbox.cleanup(Duration::from_secs(86400)).await.unwrap(),
        2500
    );
    assert_eq!(h.scalar("SELECT count(*) FROM hare_outbox_inbox").await, 1);
    assert_eq!(inbox.cleanup(Duration::from_secs(86400)).await.unwrap(), 0);
}
