//! The lease and mark statements, called directly.

use chrono::{DateTime, SubsecRound, Utc};
use hare_outbox_core::backend::{
    EventFailure, EventLeaseExtendParams, EventLeaseParams, EventMarkDeliveredParams,
    EventMarkFailedParams,
};
use hare_outbox_core::{Backend, Outbox, OutboxEvent};
use hare_outbox_sqlite::SqliteBackend;

use crate::common::{enqueue, message, setup, stored};

fn secs(n: i64) -> chrono::Duration {
    chrono::Duration::seconds(n)
}

/// A time that survives the microsecond storage unchanged.
fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

async fn lease(
    outbox: &Outbox<SqliteBackend>,
    at: DateTime<Utc>,
    by: &str,
    limit: i64,
) -> Vec<OutboxEvent> {
    outbox
        .backend()
        .event_lease(
            outbox.table(),
            &EventLeaseParams::new(by.into(), limit, std::time::Duration::from_secs(60))
                .with_now(at),
        )
        .await
        .expect("lease")
        .events
}

fn sequences(events: &[OutboxEvent]) -> Vec<i64> {
    events.iter().map(|e| e.sequence).collect()
}

#[tokio::test]
async fn a_lease_takes_one_event_per_key_in_sequence_order_up_to_the_limit() {
    let (_db, outbox) = setup("hare_outbox").await;
    let mut keyed = Vec::new();
    for n in 0..5 {
        keyed.push(enqueue(&outbox, message("t", Some("k"), n)).await);
    }
    let free1 = enqueue(&outbox, message("t", None, 1)).await;
    let free2 = enqueue(&outbox, message("t", None, 2)).await;
    let other = enqueue(&outbox, message("t", Some("other"), 1)).await;

    let at = now();
    let first = lease(&outbox, at, "r1", 2).await;
    assert_eq!(
        sequences(&first),
        [keyed[0].sequence, free1.sequence],
        "limit 2 in sequence order"
    );
    assert!(
        first
            .iter()
            .all(|e| e.leased_by.as_deref() == Some("r1") && e.lease_until == Some(at + secs(60)))
    );
    let rest = lease(&outbox, at, "r2", 100).await;
    assert_eq!(
        sequences(&rest),
        [free2.sequence, other.sequence],
        "k waits behind its leased first event"
    );
    assert!(lease(&outbox, at, "r3", 100).await.is_empty());
}

#[tokio::test]
async fn a_lease_is_taken_again_only_after_it_ends_and_a_retry_only_when_due() {
    let (db, outbox) = setup("hare_outbox").await;
    let event = enqueue(&outbox, message("t", None, 1)).await;
    let at = now();
    assert_eq!(lease(&outbox, at, "r1", 10).await.len(), 1);
    let until = at + secs(60);
    assert!(
        lease(&outbox, until, "r2", 10).await.is_empty(),
        "a lease ending exactly now is still live"
    );
    let taken = lease(&outbox, until + chrono::Duration::microseconds(1), "r2", 10).await;
    assert_eq!(sequences(&taken), [event.sequence]);
    assert_eq!(taken[0].leased_by.as_deref(), Some("r2"));

    let due = at + secs(600);
    sqlx::query(
        "UPDATE hare_outbox SET lease_until = NULL, leased_by = NULL, next_attempt_at = ?1",
    )
    .bind(due.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
    .execute(&db.pool)
    .await
    .expect("schedule a retry");
    assert!(
        lease(&outbox, due - chrono::Duration::microseconds(1), "r3", 10)
            .await
            .is_empty()
    );
    assert_eq!(
        lease(&outbox, due, "r3", 10).await.len(),
        1,
        "due at next_attempt_at"
    );
}

#[tokio::test]
async fn mark_failed_by_a_relay_that_no_longer_holds_the_lease_changes_nothing() {
    let (_db, outbox) = setup("hare_outbox").await;
    let backend = outbox.backend();
    let table = outbox.table();
    let event = enqueue(&outbox, message("t", Some("k"), 1)).await;
    let other = enqueue(&outbox, message("t", None, 2)).await;
    let at = now();
    assert_eq!(lease(&outbox, at, "r1", 10).await.len(), 2);
    let failure = |sequence, attempts| {
        EventFailure::retry(
            sequence,
            attempts,
            "boom".into(),
            std::time::Duration::from_secs(5),
        )
    };

    let leased = stored(&outbox, &event).await;
    let by_other = EventMarkFailedParams::new(vec![failure(event.sequence, 1)], "r2".into());
    assert_eq!(
        backend
            .event_mark_failed(table, &by_other)
            .await
            .expect("mark"),
        0
    );
    assert_eq!(stored(&outbox, &event).await, leased);

    // The holder records both failures in one call; a dead letter too.
    let by_holder = EventMarkFailedParams::new(
        vec![
            failure(event.sequence, 1),
            EventFailure::dead(other.sequence, 5, "gave up".into()),
        ],
        "r1".into(),
    )
    .with_now(at);
    assert_eq!(
        backend
            .event_mark_failed(table, &by_holder)
            .await
            .expect("mark"),
        2
    );
    let failed = stored(&outbox, &event).await;
    assert_eq!(failed.attempts, 1);
    assert_eq!(failed.last_error.as_deref(), Some("boom"));
    assert_eq!(failed.next_attempt_at, Some(at + secs(5)));
    assert_eq!(
        (
            failed.lease_until,
            failed.leased_by.clone(),
            failed.dead_lettered_at
        ),
        (None, None, None)
    );
    let dead = stored(&outbox, &other).await;
    assert_eq!(
        (dead.attempts, dead.dead_lettered_at, dead.next_attempt_at),
        (5, Some(at), None)
    );

    // Once the lease is cleared, the same relay cannot record again.
    assert_eq!(
        backend
            .event_mark_failed(table, &by_holder)
            .await
            .expect("mark"),
        0
    );
    assert_eq!(stored(&outbox, &event).await, failed);

    // A published event is never marked failed.
    let fresh = enqueue(&outbox, message("t", None, 3)).await;
    assert_eq!(lease(&outbox, now(), "r1", 10).await.len(), 1);
    backend
        .event_mark_delivered(
            table,
            &EventMarkDeliveredParams::new(vec![fresh.sequence]).with_now(now()),
        )
        .await
        .expect("delivered");
    let published = stored(&outbox, &fresh).await;
    let late = EventMarkFailedParams::new(vec![failure(fresh.sequence, 1)], "r1".into());
    assert_eq!(
        backend.event_mark_failed(table, &late).await.expect("mark"),
        0
    );
    assert_eq!(stored(&outbox, &fresh).await, published);
}

#[tokio::test]
async fn mark_delivered_keeps_the_first_published_at() {
    let (_db, outbox) = setup("hare_outbox").await;
    let backend = outbox.backend();
    let table = outbox.table();
    let one = enqueue(&outbox, message("t", None, 1)).await;
    let two = enqueue(&outbox, message("t", None, 2)).await;
    let first = now();
    assert_eq!(lease(&outbox, first, "r1", 10).await.len(), 2);
    let params = EventMarkDeliveredParams::new(vec![one.sequence, two.sequence]).with_now(first);
    assert_eq!(
        backend
            .event_mark_delivered(table, &params)
            .await
            .expect("mark"),
        2
    );
    for event in [&one, &two] {
        let stored = stored(&outbox, event).await;
        assert_eq!(stored.published_at, Some(first));
        assert_eq!((stored.lease_until, stored.leased_by), (None, None));
    }

    let later = EventMarkDeliveredParams::new(vec![one.sequence]).with_now(first + secs(30));
    assert_eq!(
        backend
            .event_mark_delivered(table, &later)
            .await
            .expect("mark"),
        0
    );
    assert_eq!(stored(&outbox, &one).await.published_at, Some(first));
    let empty = EventMarkDeliveredParams::new(Vec::new()).with_now(first);
    assert_eq!(
        backend
            .event_mark_delivered(table, &empty)
            .await
            .expect("mark"),
        0
    );
}

#[tokio::test]
async fn only_the_holder_extends_a_lease_and_never_of_a_published_event() {
    let (_db, outbox) = setup("hare_outbox").await;
    let backend = outbox.backend();
    let table = outbox.table();
    let one = enqueue(&outbox, message("t", None, 1)).await;
    let two = enqueue(&outbox, message("t", None, 2)).await;
    let at = now();
    let batch = vec![one.sequence, two.sequence];
    assert_eq!(lease(&outbox, at, "r1", 10).await.len(), 2);

    let by_other = EventLeaseExtendParams::new(
        batch.clone(),
        "r2".into(),
        std::time::Duration::from_secs(600),
    )
    .with_now(at);
    assert_eq!(
        backend
            .event_lease_extend(table, &by_other)
            .await
            .expect("extend"),
        0
    );
    assert_eq!(stored(&outbox, &one).await.lease_until, Some(at + secs(60)));

    let by_holder = EventLeaseExtendParams::new(
        batch.clone(),
        "r1".into(),
        std::time::Duration::from_secs(120),
    )
    .with_now(at);
    assert_eq!(
        backend
            .event_lease_extend(table, &by_holder)
            .await
            .expect("extend"),
        2
    );
    assert_eq!(
        stored(&outbox, &two).await.lease_until,
        Some(at + secs(120))
    );

    backend
        .event_mark_delivered(
            table,
            &EventMarkDeliveredParams::new(vec![one.sequence]).with_now(at),
        )
        .await
        .expect("delivered");
    assert_eq!(
        backend
            .event_lease_extend(table, &by_holder)
            .await
            .expect("extend"),
        1
    );
    let published = stored(&outbox, &one).await;
    assert_eq!((published.lease_until, published.leased_by), (None, None));
}
