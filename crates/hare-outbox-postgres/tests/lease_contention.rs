//! PostgreSQL's lease under contention and how the relay's statements commit: a lease that finds
//! only heads another lease holds locked says so (and where to walk on) instead of looking like
//! an empty outbox, and the relay's `synchronous_commit = off` never outlives its own statement.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hare_outbox_core::backend::{EventLeaseParams, EventMarkDeliveredParams};
use hare_outbox_core::{Backend, Outbox, OutboxMessage, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::json;

async fn put(outbox: &Outbox<PgBackend>, key: &str, count: i64) {
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_many(
        (0..count)
            .map(|n| OutboxMessage::new("contention.event", json!({ "n": n })).ordering_key(key))
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

fn lease(cursor: &str) -> EventLeaseParams {
    EventLeaseParams::new("relay-a".to_owned(), 100, Duration::from_secs(60))
        .with_max_events_per_key(100)
        .with_min_keys(10)
        .with_key_cursor(cursor)
}

/// Key `a`'s head is row-locked by another transaction (as another relay's lease statement holds
/// it for an instant): a lease from the start leases nothing, reports `contended` and a cursor
/// past `a`; a lease from that cursor takes key `b`'s run, and once the lock is gone key `a` is
/// leased without contention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_locked_by_another_lease_are_reported_as_contended() {
    let schema = TestSchema::new(4).await;
    let table = OutboxTable::parse("outbox").unwrap();
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), table.clone());
    outbox.migrate().await.unwrap();
    put(&outbox, "a", 3).await;

    let mut holder = schema.pool.begin().await.unwrap();
    sqlx::query(
        "SELECT sequence FROM outbox WHERE ordering_key = 'a' ORDER BY sequence LIMIT 1 FOR UPDATE",
    )
    .execute(&mut *holder)
    .await
    .unwrap();
    let backend = outbox.backend();
    let blocked = backend.event_lease(&table, &lease("")).await.unwrap();
    assert!(blocked.events.is_empty(), "{:?}", blocked.events);
    assert!(
        blocked.contended,
        "a locked head is contention, not an empty outbox"
    );
    assert_eq!(blocked.key_cursor.as_deref(), Some("a"));

    put(&outbox, "b", 2).await;
    let past = backend
        .event_lease(&table, &lease(blocked.key_cursor.as_deref().unwrap()))
        .await
        .unwrap();
    let keys: Vec<_> = past.events.iter().map(|e| e.ordering_key.clone()).collect();
    assert_eq!(keys, vec![Some("b".to_owned()); 2]);

    holder.rollback().await.unwrap();
    let free = backend.event_lease(&table, &lease("b")).await.unwrap();
    assert_eq!(free.events.len(), 3);
    assert!(!free.contended);
    // Nothing left that may be leased: an empty lease, without contention.
    let empty = backend.event_lease(&table, &lease("a")).await.unwrap();
    assert!(empty.events.is_empty() && !empty.contended, "{empty:?}");
    schema.drop_schema().await;
}

/// The relay's lease and marks turn `synchronous_commit` off for their own transaction only: on
/// the one connection of the pool, the session's setting is `on` before and after them, and a
/// transaction of the application on that connection commits synchronously. With synchronous
/// relay commits the statements work the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_statements_leave_the_sessions_synchronous_commit_alone() {
    let schema = TestSchema::new(1).await;
    let table = OutboxTable::parse("outbox").unwrap();
    for synchronous in [false, true] {
        let backend =
            PgBackend::new(schema.pool.clone()).with_synchronous_relay_commits(synchronous);
        assert_eq!(backend.synchronous_relay_commits(), synchronous);
        let outbox = Outbox::new(backend, table.clone());
        outbox.migrate().await.unwrap();
        put(&outbox, "k", 5).await;
        let leased = outbox
            .backend()
            .event_lease(&table, &lease(""))
            .await
            .unwrap();
        assert_eq!(leased.events.len(), 5);
        let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(&schema.pool)
            .await
            .unwrap();
        assert_eq!(
            setting, "on",
            "after the lease (synchronous: {synchronous})"
        );
        let marked = outbox
            .backend()
            .event_mark_delivered(
                &table,
                &EventMarkDeliveredParams::new(leased.events.iter().map(|e| e.sequence).collect()),
            )
            .await
            .unwrap();
        assert_eq!(marked, 5);
        let mut tx = schema.pool.begin().await.unwrap();
        let inside: String = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            inside, "on",
            "in the application's transaction after the marks"
        );
    }
    schema.drop_schema().await;
}
