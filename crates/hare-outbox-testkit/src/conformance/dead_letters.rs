//! Dead letters on any backend: retrying one releases its key, the retry statement takes every
//! dead letter of the topics (or the ids given) and nothing published or pending.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use hare_outbox_core::backend::EventRetryDeadLetteredParams;
use hare_outbox_core::{
    DeliveryError, FnDelivery, JournalBackend, OutboxEvent, OutboxMessage, OutboxRelay, TopicFilter,
};
use serde_json::json;

use super::harness::{
    Cell, EventState, Harness, config, days_ago, enqueue, event_in, outbox, stored,
};

type Topics = Arc<Mutex<Vec<String>>>;

/// A delivery that records the topics it delivers and refuses `fail_topic` with `refused`.
fn recording(seen: &Topics, fail_topic: &'static str) -> impl hare_outbox_core::Delivery {
    let seen = seen.clone();
    FnDelivery::new(move |e: OutboxEvent| {
        let seen = seen.clone();
        async move {
            if e.topic == fail_topic {
                return Err(DeliveryError::new("refused"));
            }
            seen.lock().unwrap().push(e.topic);
            Ok(())
        }
    })
}

/// A dead letter holds back its key; a retry that matches neither its topics nor its id (or
/// comes from a relay on other topics) changes nothing, a bad pattern is an error; the retry
/// resets attempts and schedule but keeps the last error, and one poll then delivers the key's
/// run in order.
pub async fn retrying_a_dead_letter_releases_its_key<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let poison = enqueue(
        h,
        &outbox,
        OutboxMessage::new("poison", json!(1)).ordering_key("K"),
    )
    .await;
    let next = enqueue(
        h,
        &outbox,
        OutboxMessage::new("ok", json!(2)).ordering_key("K"),
    )
    .await;
    let seen = Topics::default();
    let failing = OutboxRelay::new(
        outbox.clone(),
        recording(&seen, "poison"),
        config("failing").with_max_delivery_attempts(1),
    )
    .unwrap();
    assert_eq!(failing.poll_once().await.unwrap().dead_lettered, 1);
    assert_eq!(
        failing.poll_once().await.unwrap().leased,
        0,
        "the dead letter holds back its key"
    );
    let backlog = failing.journal().backlog(&[]).await.unwrap();
    assert_eq!((backlog.pending, backlog.dead_lettered), (1, 1));

    assert_eq!(
        failing
            .journal()
            .retry_dead_lettered(&["billing.*"], &[])
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        failing
            .journal()
            .retry_dead_lettered(&[], &[next.id])
            .await
            .unwrap(),
        0
    );
    assert!(
        failing
            .journal()
            .retry_dead_lettered(&["bad*pattern"], &[])
            .await
            .is_err()
    );
    let elsewhere = OutboxRelay::new(
        outbox.clone(),
        recording(&seen, ""),
        config("elsewhere").with_topics(["ok"]),
    )
    .unwrap();
    assert_eq!(
        elsewhere
            .journal()
            .retry_dead_lettered(&[], &[poison.id])
            .await
            .unwrap(),
        0
    );
    assert!(stored(&outbox, &poison).await.dead_lettered_at.is_some());

    let fixed = OutboxRelay::new(outbox.clone(), recording(&seen, ""), config("fixed")).unwrap();
    assert_eq!(
        fixed
            .journal()
            .retry_dead_lettered(&["poison"], &[poison.id])
            .await
            .unwrap(),
        1
    );
    let retried = stored(&outbox, &poison).await;
    assert_eq!((retried.attempts, retried.dead_lettered_at), (0, None));
    assert_eq!(
        (
            retried.next_attempt_at,
            retried.lease_until,
            retried.leased_by.clone()
        ),
        (None, None, None)
    );
    assert_eq!(
        retried.last_error.as_deref(),
        Some("refused"),
        "the last error is kept for the record"
    );
    let backlog = fixed.journal().backlog(&[]).await.unwrap();
    assert_eq!((backlog.pending, backlog.dead_lettered), (2, 0));
    assert_eq!(fixed.poll_once().await.unwrap().delivered, 2);
    assert_eq!(*seen.lock().unwrap(), ["poison", "ok"]);
}

fn filter(include: Option<&[&str]>, exclude: &[&str]) -> TopicFilter {
    TopicFilter::new(include, exclude).expect("valid filter")
}

/// Without ids the retry takes every dead letter of the topics, resetting attempts, schedule and
/// lease; a dead letter published since, a pending event and other topics are untouched; an
/// empty id list takes nothing; with ids, only dead letters among them.
pub async fn retry_without_ids_takes_every_dead_letter_of_the_topics_and_nothing_published<
    H: Harness,
>(
    h: &H,
) {
    let outbox = outbox(h).await;
    let dead = EventState::Dead(days_ago(3));
    let a1 = event_in(h, &outbox, "a.x", std::slice::from_ref(&dead)).await;
    let a2 = event_in(h, &outbox, "a.y", std::slice::from_ref(&dead)).await;
    let b = event_in(h, &outbox, "b.x", std::slice::from_ref(&dead)).await;
    // Published after it was dead-lettered (a late mark): not a dead letter any more.
    let published = event_in(
        h,
        &outbox,
        "a.x",
        &[dead.clone(), EventState::Published(days_ago(1))],
    )
    .await;
    let pending = event_in(h, &outbox, "a.x", &[]).await;
    h.update(
        outbox.table(),
        "1 = 1",
        &[
            ("attempts", Cell::Int(5)),
            ("last_error", Cell::Text(Some("boom".into()))),
            ("next_attempt_at", Cell::Time(Some(days_ago(1)))),
            ("lease_until", Cell::Time(Some(days_ago(1)))),
            ("leased_by", Cell::Text(Some("gone".into()))),
        ],
    )
    .await;
    let backend = outbox.backend();
    let table = outbox.table();

    let none = EventRetryDeadLetteredParams::new(filter(Some(&["a.*"]), &[]), Some(Vec::new()));
    assert_eq!(
        backend
            .event_retry_dead_lettered(table, &none)
            .await
            .unwrap(),
        0
    );
    let params = EventRetryDeadLetteredParams::new(filter(Some(&["a.*"]), &[]), None);
    assert_eq!(
        backend
            .event_retry_dead_lettered(table, &params)
            .await
            .unwrap(),
        2
    );
    for event in [&a1, &a2] {
        let event = stored(&outbox, event).await;
        assert_eq!(
            (
                event.attempts,
                event.dead_lettered_at,
                event.next_attempt_at,
                event.lease_until,
                event.leased_by.as_deref(),
                event.last_error.as_deref()
            ),
            (0, None, None, None, None, Some("boom")),
            "{event:?}"
        );
    }
    for event in [&b, &published, &pending] {
        let event = stored(&outbox, event).await;
        assert_eq!(event.attempts, 5, "untouched: {event:?}");
        assert_eq!(event.leased_by.as_deref(), Some("gone"), "{event:?}");
    }
    assert_eq!(
        backend
            .event_retry_dead_lettered(table, &params)
            .await
            .unwrap(),
        0
    );
    let by_id =
        EventRetryDeadLetteredParams::new(TopicFilter::all(), Some(vec![b.id, published.id]));
    assert_eq!(
        backend
            .event_retry_dead_lettered(table, &by_id)
            .await
            .unwrap(),
        1
    );
}
