//! The mark statements on any backend, called directly and through relays: only the lease
//! holder marks or extends, a published event is never marked again, an expired lease is taken
//! by another relay and the old holder's late marks change nothing, and a long delivery keeps
//! its lease.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use hare_outbox_core::backend::{
    EventFailure, EventLeaseExtendParams, EventLeaseParams, EventMarkDeliveredParams,
    EventMarkFailedParams,
};
use hare_outbox_core::{Backend, DeliveryError, FnDelivery, Outbox, OutboxEvent, OutboxRelay};

use super::harness::{Harness, config, drain, enqueue, message, now, outbox, recording, stored};
use crate::wait_for;

fn secs(n: i64) -> chrono::Duration {
    chrono::Duration::seconds(n)
}

/// Leases up to `limit` events for `by` for 60 s, as of `at`.
pub(crate) async fn lease<B: Backend>(
    outbox: &Outbox<B>,
    at: DateTime<Utc>,
    by: &str,
    limit: i64,
) -> Vec<OutboxEvent> {
    outbox
        .backend()
        .event_lease(
            outbox.table(),
            &EventLeaseParams::new(by.into(), limit, Duration::from_secs(60)).with_now(at),
        )
        .await
        .expect("lease")
        .events
}

fn failure(sequence: i64, attempts: i32) -> EventFailure {
    EventFailure::retry(sequence, attempts, "boom".into(), Duration::from_secs(5))
}

/// A failure mark by a relay that does not hold the lease changes nothing; the holder records a
/// retry and a dead letter in one call, then cannot record again; a published event is never
/// marked failed.
pub async fn mark_failed_by_a_relay_that_no_longer_holds_the_lease_changes_nothing<H: Harness>(
    h: &H,
) {
    let outbox = outbox(h).await;
    let backend = outbox.backend();
    let table = outbox.table();
    let event = enqueue(h, &outbox, message("t", Some("k"), 1)).await;
    let other = enqueue(h, &outbox, message("t", None, 2)).await;
    let at = now();
    assert_eq!(lease(&outbox, at, "r1", 10).await.len(), 2);

    let leased = stored(&outbox, &event).await;
    let by_other = EventMarkFailedParams::new(vec![failure(event.sequence, 1)], "r2".into());
    assert_eq!(
        backend.event_mark_failed(table, &by_other).await.unwrap(),
        0
    );
    assert_eq!(stored(&outbox, &event).await, leased);

    let by_holder = EventMarkFailedParams::new(
        vec![
            failure(event.sequence, 1),
            EventFailure::dead(other.sequence, 5, "gave up".into()),
        ],
        "r1".into(),
    )
    .with_now(at);
    assert_eq!(
        backend.event_mark_failed(table, &by_holder).await.unwrap(),
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
        backend.event_mark_failed(table, &by_holder).await.unwrap(),
        0
    );
    assert_eq!(stored(&outbox, &event).await, failed);

    // A published event is never marked failed.
    let fresh = enqueue(h, &outbox, message("t", None, 3)).await;
    assert_eq!(lease(&outbox, now(), "r1", 10).await.len(), 1);
    backend
        .event_mark_delivered(
            table,
            &EventMarkDeliveredParams::new(vec![fresh.sequence]).with_now(now()),
        )
        .await
        .unwrap();
    let published = stored(&outbox, &fresh).await;
    let late = EventMarkFailedParams::new(vec![failure(fresh.sequence, 1)], "r1".into());
    assert_eq!(backend.event_mark_failed(table, &late).await.unwrap(), 0);
    assert_eq!(stored(&outbox, &fresh).await, published);
}

/// A delivered mark sets `published_at` once and clears the lease; a second mark (later) and an
/// empty mark change nothing.
pub async fn mark_delivered_keeps_the_first_published_at<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let backend = outbox.backend();
    let table = outbox.table();
    let one = enqueue(h, &outbox, message("t", None, 1)).await;
    let two = enqueue(h, &outbox, message("t", None, 2)).await;
    let first = now();
    assert_eq!(lease(&outbox, first, "r1", 10).await.len(), 2);
    let params = EventMarkDeliveredParams::new(vec![one.sequence, two.sequence]).with_now(first);
    assert_eq!(
        backend.event_mark_delivered(table, &params).await.unwrap(),
        2
    );
    for event in [&one, &two] {
        let stored = stored(&outbox, event).await;
        assert_eq!(stored.published_at, Some(first));
        assert_eq!((stored.lease_until, stored.leased_by), (None, None));
    }
    let later = EventMarkDeliveredParams::new(vec![one.sequence]).with_now(first + secs(30));
    assert_eq!(
        backend.event_mark_delivered(table, &later).await.unwrap(),
        0
    );
    assert_eq!(stored(&outbox, &one).await.published_at, Some(first));
    let empty = EventMarkDeliveredParams::new(Vec::new()).with_now(first);
    assert_eq!(
        backend.event_mark_delivered(table, &empty).await.unwrap(),
        0
    );
}

/// Only the lease holder extends a lease, and never that of a published event.
pub async fn only_the_holder_extends_a_lease_and_never_of_a_published_event<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let backend = outbox.backend();
    let table = outbox.table();
    let one = enqueue(h, &outbox, message("t", None, 1)).await;
    let two = enqueue(h, &outbox, message("t", None, 2)).await;
    let at = now();
    let batch = vec![one.sequence, two.sequence];
    assert_eq!(lease(&outbox, at, "r1", 10).await.len(), 2);

    let by_other =
        EventLeaseExtendParams::new(batch.clone(), "r2".into(), Duration::from_secs(600))
            .with_now(at);
    assert_eq!(
        backend.event_lease_extend(table, &by_other).await.unwrap(),
        0
    );
    assert_eq!(stored(&outbox, &one).await.lease_until, Some(at + secs(60)));

    let by_holder =
        EventLeaseExtendParams::new(batch.clone(), "r1".into(), Duration::from_secs(120))
            .with_now(at);
    assert_eq!(
        backend.event_lease_extend(table, &by_holder).await.unwrap(),
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
        .unwrap();
    assert_eq!(
        backend.event_lease_extend(table, &by_holder).await.unwrap(),
        1
    );
    let published = stored(&outbox, &one).await;
    assert_eq!((published.lease_until, published.leased_by), (None, None));
}

/// A relay that leased an event and died: a running relay respects the live lease, takes the
/// event once it expires and delivers it; the dead relay's late failure and delivered marks
/// change nothing.
pub async fn an_expired_lease_is_leased_again_and_the_old_holder_cannot_mark_it<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let event = enqueue(h, &outbox, message("orders", Some("k"), 1)).await;
    let backend = outbox.backend();
    let table = outbox.table();
    let leased = backend
        .event_lease(
            table,
            &EventLeaseParams::new("crashed".into(), 10, Duration::from_secs(1))
                .with_now(Utc::now()),
        )
        .await
        .unwrap()
        .events;
    assert_eq!(leased.len(), 1);

    let (seen, delivery) = recording();
    let relay = OutboxRelay::new(
        outbox.clone(),
        delivery,
        config("relay-2")
            .with_lease(Duration::from_secs(1))
            .with_delivery_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    assert_eq!(
        relay.poll_once().await.unwrap().leased,
        0,
        "a live lease is respected"
    );
    let relay = &relay;
    let outcome = wait_for(
        "the expired lease to be leased again",
        Duration::from_secs(20),
        || async move {
            let outcome = relay.poll_once().await.unwrap();
            (outcome.leased > 0).then_some(outcome)
        },
    )
    .await;
    assert_eq!((outcome.leased, outcome.delivered), (1, 1));
    let delivered: Vec<_> = drain(&seen).iter().map(|e| e.id).collect();
    assert_eq!(delivered, [event.id]);
    let published = stored(&outbox, &event).await;
    assert!(published.published_at.is_some());
    assert_eq!(
        (published.lease_until, published.leased_by.clone()),
        (None, None)
    );

    let late = EventMarkFailedParams::new(
        vec![EventFailure::retry(
            event.sequence,
            1,
            "late".into(),
            Duration::ZERO,
        )],
        "crashed".into(),
    );
    assert_eq!(backend.event_mark_failed(table, &late).await.unwrap(), 0);
    let late = EventMarkDeliveredParams::new(vec![event.sequence]);
    assert_eq!(backend.event_mark_delivered(table, &late).await.unwrap(), 0);
    assert_eq!(stored(&outbox, &event).await, published);
}

/// A delivery that takes three lease periods keeps its lease (the relay extends it): another
/// relay polling meanwhile takes nothing, and the event is delivered once.
pub async fn a_long_delivery_keeps_its_lease<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    enqueue(h, &outbox, message("slow", None, 1)).await;
    let config = config("slow")
        .with_lease(Duration::from_secs(1))
        .with_delivery_timeout(Duration::from_millis(800));
    let calls = Arc::new(Mutex::new(0));
    // The delivery's own timeout is bypassed by a batch override.
    struct Slow(Arc<Mutex<i32>>);
    #[async_trait::async_trait]
    impl hare_outbox_core::Delivery for Slow {
        async fn deliver(&self, _e: &OutboxEvent) -> Result<(), DeliveryError> {
            Ok(())
        }
        async fn deliver_batch(
            &self,
            events: &[OutboxEvent],
            _c: usize,
            _t: Duration,
        ) -> Vec<Result<(), DeliveryError>> {
            *self.0.lock().unwrap() += 1;
            tokio::time::sleep(Duration::from_millis(3000)).await;
            events.iter().map(|_| Ok(())).collect()
        }
    }
    let slow = OutboxRelay::new(outbox.clone(), Slow(calls.clone()), config.clone()).unwrap();
    let other = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
        config.with_name("other"),
    )
    .unwrap();
    let polls = async {
        let mut stolen = 0;
        for _ in 0..28 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            stolen += other.poll_once().await.unwrap().leased;
        }
        stolen
    };
    let (outcome, stolen) = tokio::join!(slow.poll_once(), polls);
    assert_eq!(outcome.unwrap().delivered, 1);
    assert_eq!(stolen, 0, "the extended lease kept the other relay away");
    assert_eq!(*calls.lock().unwrap(), 1);
}
