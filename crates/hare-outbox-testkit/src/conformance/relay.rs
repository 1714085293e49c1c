//! Full relay cycles on any backend: one event per key per batch with retries, dead letters and
//! the dead key held back; exponential back-off; unreadable rows dead-lettered without failing
//! the poll; observers and metrics; an event no route takes.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use hare_outbox_core::{
    DeliveryError, FnDelivery, OutboxEvent, OutboxMessage, OutboxRelay, RelayEvent, TopicRouter,
};
use serde_json::json;
use uuid::Uuid;

use super::harness::{Cell, Harness, config, drain, enqueue, message, outbox, recording, stored};
use crate::wait_for;

fn ids(events: &[OutboxEvent]) -> HashSet<Uuid> {
    events.iter().map(|e| e.id).collect()
}

fn assert_one_per_key(batch: &[OutboxEvent]) {
    let mut keys = HashSet::new();
    for event in batch {
        if let Some(key) = &event.ordering_key {
            assert!(
                keys.insert(key.clone()),
                "two events of key {key} in one batch: {batch:#?}"
            );
        }
    }
}

/// With `max_events_per_key = 1`, poll by poll: the first event of every key and the unordered
/// one; a failure is scheduled for retry and holds back its key; once due it fails again and is
/// dead-lettered; other keys flow while the dead key's next event stays untouched.
pub async fn with_one_event_per_key_the_relay_delivers_in_order_retries_dead_letters_and_holds_back_the_dead_key<
    H: Harness,
>(
    h: &H,
) {
    let outbox = outbox(h).await;
    let a1 = enqueue(h, &outbox, message("orders", Some("a"), 1)).await;
    let b1 = enqueue(h, &outbox, message("orders", Some("b"), 1)).await;
    let p1 = enqueue(h, &outbox, message("poison", Some("p"), 1)).await;
    let a2 = enqueue(h, &outbox, message("orders", Some("a"), 2)).await;
    let b2 = enqueue(h, &outbox, message("orders", Some("b"), 2)).await;
    let c = enqueue(h, &outbox, message("orders", None, 1)).await;
    let p2 = enqueue(h, &outbox, message("orders", Some("p"), 2)).await;
    let q = enqueue(h, &outbox, message("orders", Some("q"), 1)).await;

    let (seen, delivery) = recording();
    let relay = OutboxRelay::new(
        outbox.clone(),
        delivery,
        config("relay-1")
            .with_max_events_per_key(1)
            .with_max_delivery_attempts(2)
            .with_retry_base(Duration::from_secs(60)),
    )
    .unwrap();

    let before = Utc::now();
    let outcome = relay.poll_once().await.unwrap();
    assert_eq!(
        (
            outcome.leased,
            outcome.delivered,
            outcome.failed,
            outcome.dead_lettered
        ),
        (5, 4, 1, 0)
    );
    let batch = drain(&seen);
    assert_one_per_key(&batch);
    assert_eq!(
        ids(&batch),
        ids(&[a1.clone(), b1.clone(), p1.clone(), c.clone(), q.clone()])
    );
    let failed = stored(&outbox, &p1).await;
    assert_eq!(failed.attempts, 1);
    assert_eq!(failed.last_error.as_deref(), Some("refused: poison"));
    let next = failed.next_attempt_at.expect("next attempt set");
    assert!(
        next > before + chrono::Duration::seconds(50),
        "{next} after {before}"
    );
    assert_eq!(
        (
            failed.lease_until,
            failed.leased_by,
            failed.published_at,
            failed.dead_lettered_at
        ),
        (None, None, None, None)
    );
    for delivered in [&a1, &b1, &c, &q] {
        let event = stored(&outbox, delivered).await;
        assert!(event.published_at.is_some(), "{event:?}");
        assert_eq!((event.lease_until, event.leased_by), (None, None));
    }

    // The second events of a and b; p2 waits behind the failed p1, which is not due.
    let outcome = relay.poll_once().await.unwrap();
    assert_eq!((outcome.leased, outcome.delivered), (2, 2));
    assert_eq!(ids(&drain(&seen)), ids(&[a2.clone(), b2.clone()]));
    assert_eq!(relay.poll_once().await.unwrap().leased, 0);

    // p1 comes due, fails again and runs out of attempts.
    let long_ago = Utc::now() - chrono::Duration::days(1);
    h.update(
        outbox.table(),
        &format!("sequence = {}", p1.sequence),
        &[("next_attempt_at", Cell::Time(Some(long_ago)))],
    )
    .await;
    let outcome = relay.poll_once().await.unwrap();
    assert_eq!((outcome.leased, outcome.dead_lettered), (1, 1));
    assert_eq!(ids(&drain(&seen)), ids(std::slice::from_ref(&p1)));
    let dead = stored(&outbox, &p1).await;
    assert_eq!(dead.attempts, 2);
    assert!(dead.dead_lettered_at.is_some());
    assert_eq!(
        (dead.next_attempt_at, dead.published_at, dead.leased_by),
        (None, None, None)
    );

    // Other keys flow; p2 stays held back by the dead p1.
    let r = enqueue(h, &outbox, message("orders", Some("r"), 1)).await;
    let a3 = enqueue(h, &outbox, message("orders", Some("a"), 3)).await;
    let outcome = relay.poll_once().await.unwrap();
    assert_eq!((outcome.leased, outcome.delivered), (2, 2));
    assert_eq!(ids(&drain(&seen)), ids(&[r, a3]));
    assert_eq!(
        stored(&outbox, &p2).await,
        p2,
        "the event behind a dead letter is untouched"
    );
    assert_eq!(relay.poll_once().await.unwrap().leased, 0);
}

/// A running relay retries a failing event after 0.1, 0.2 and 0.4 s (growing delays), dead-letters
/// it after four attempts with the last error, and holds back only its key.
pub async fn failures_back_off_then_dead_letter_and_hold_back_only_their_key<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let poison = enqueue(
        h,
        &outbox,
        OutboxMessage::new("poison", json!(1)).ordering_key("K"),
    )
    .await;
    let after = enqueue(
        h,
        &outbox,
        OutboxMessage::new("ok", json!(2)).ordering_key("K"),
    )
    .await;
    let other = enqueue(
        h,
        &outbox,
        OutboxMessage::new("ok", json!(3)).ordering_key("L"),
    )
    .await;
    let tries = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let t = tries.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |e: OutboxEvent| {
            let t = t.clone();
            async move {
                if e.topic == "poison" {
                    t.lock().unwrap().push(Instant::now());
                    return Err(DeliveryError::new("subscriber answered 500"));
                }
                Ok(())
            }
        }),
        config("relay")
            .with_retry_base(Duration::from_millis(100))
            .with_retry_max(Duration::from_secs(2))
            .with_max_delivery_attempts(4),
    )
    .unwrap();
    relay.start().unwrap();
    let dead = wait_for(
        "the poison event dead-lettered",
        Duration::from_secs(30),
        || async {
            outbox
                .get(poison.id)
                .await
                .unwrap()
                .filter(|e| e.dead_lettered_at.is_some())
        },
    )
    .await;
    assert_eq!(dead.attempts, 4);
    assert_eq!(dead.last_error.as_deref(), Some("subscriber answered 500"));
    assert!(
        stored(&outbox, &other).await.published_at.is_some(),
        "other keys flow"
    );
    let polls = relay.stats().polls;
    wait_for("more polls", Duration::from_secs(10), || async {
        (relay.stats().polls > polls + 3).then_some(())
    })
    .await;
    assert!(stored(&outbox, &after).await.published_at.is_none());
    relay.stop().await.unwrap();

    let times = tries.lock().unwrap().clone();
    assert_eq!(times.len(), 4);
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    // 0.1 s, 0.2 s, 0.4 s, each ±10%, plus up to one poll interval and whatever a loaded machine
    // adds: the lower bounds show the doubling (a late first retry can exceed the second's
    // backoff, so the gaps themselves are not compared).
    assert!(
        gaps[0] >= 0.09 && gaps[1] >= 0.18 && gaps[2] >= 0.36,
        "{gaps:?}"
    );
    assert!(gaps.iter().all(|g| *g < 10.0), "{gaps:?}");
    assert_eq!(relay.stats().dead_lettered, 1);
    assert_eq!(relay.stats().failed, 3);
}

/// Rows the backend cannot read are dead-lettered (lease cleared, the error says so) without
/// failing the poll; the readable events around them are delivered; the dead rows hold back
/// their key as any dead letter does.
pub async fn an_unreadable_row_is_dead_lettered_and_the_others_are_delivered<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let good = enqueue(h, &outbox, message("orders", Some("a"), 1)).await;
    let unreadable = h.insert_unreadable(outbox.table(), "bad").await;
    let after = enqueue(h, &outbox, message("orders", Some("b"), 1)).await;
    let behind_bad = enqueue(h, &outbox, message("orders", Some("bad"), 2)).await;

    let (seen, delivery) = recording();
    let relay = OutboxRelay::new(outbox.clone(), delivery, config("relay-1")).unwrap();
    let outcome = relay
        .poll_once()
        .await
        .expect("an unreadable row does not fail the poll");
    assert_eq!(outcome.delivered, 2, "{outcome:?}");
    assert_eq!(ids(&drain(&seen)), ids(&[good.clone(), after.clone()]));
    assert!(stored(&outbox, &good).await.published_at.is_some());
    assert!(stored(&outbox, &after).await.published_at.is_some());
    let dead = h
        .scalar(
            "SELECT count(*) FROM outbox WHERE topic = 'unreadable' AND dead_lettered_at IS NOT NULL \
             AND lease_until IS NULL AND last_error LIKE '%cannot be read%'",
        )
        .await;
    assert_eq!(
        dead, unreadable,
        "every unreadable row is dead-lettered, not left leased"
    );
    relay.poll_once().await.unwrap();
    assert!(drain(&seen).is_empty());
    assert!(stored(&outbox, &behind_bad).await.published_at.is_none());
}

/// Observers see delivered, failed and dead-lettered events in order; the metrics count
/// deliveries, failures and dead letters per topic, record delivery delays and the backlog.
pub async fn relay_events_reach_observers_and_metrics<H: Harness>(h: &H) {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let outbox = outbox(h).await;
    for topic in ["ok", "ok", "poison"] {
        enqueue(h, &outbox, OutboxMessage::new(topic, json!({}))).await;
    }
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let observed = Arc::new(Mutex::new(Vec::new()));
    let o = observed.clone();
    let (_seen, delivery) = recording();
    let relay = OutboxRelay::new(
        outbox.clone(),
        delivery,
        config("relay").with_max_delivery_attempts(2),
    )
    .unwrap()
    .with_observer(move |e: &RelayEvent| o.lock().unwrap().push(e.clone()));
    metrics::with_local_recorder(&recorder, || {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                relay.poll_once().await.unwrap();
                wait_for("the retry", Duration::from_secs(10), || async {
                    (relay.poll_once().await.unwrap().dead_lettered == 1).then_some(())
                })
                .await;
                relay.journal().backlog(&[]).await.unwrap();
            })
        })
    });
    let observed = observed.lock().unwrap().clone();
    let kinds: Vec<&str> = observed
        .iter()
        .map(|e| match e {
            RelayEvent::Delivered { .. } => "delivered",
            RelayEvent::DeliveryFailed { .. } => "failed",
            RelayEvent::DeadLettered { .. } => "dead",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["delivered", "delivered", "failed", "dead"]);
    let snapshot = snapshotter.snapshot().into_vec();
    let value = |name: &str, topic: Option<&str>| {
        snapshot
            .iter()
            .find(|(key, _, _, _)| {
                key.key().name() == name
                    && topic.is_none_or(|t| {
                        key.key()
                            .labels()
                            .any(|l| l.key() == "topic" && l.value() == t)
                    })
            })
            .map(|(_, _, _, v)| v)
    };
    assert_eq!(
        value("hare_outbox_delivered_total", Some("ok")),
        Some(&DebugValue::Counter(2))
    );
    assert_eq!(
        value("hare_outbox_delivery_failed_total", Some("poison")),
        Some(&DebugValue::Counter(1))
    );
    assert_eq!(
        value("hare_outbox_dead_lettered_total", Some("poison")),
        Some(&DebugValue::Counter(1))
    );
    assert!(matches!(
        value("hare_outbox_delivery_delay_seconds", Some("ok")),
        Some(DebugValue::Histogram(h)) if h.len() == 2
    ));
    assert!(matches!(
        value("hare_outbox_backlog_dead_lettered", None),
        Some(DebugValue::Gauge(g)) if g.into_inner() == 1.0
    ));
}

/// An event no route of a `TopicRouter` takes is retried, then dead-lettered with an error
/// naming its topic, and never published; the routed event is delivered.
pub async fn an_unrouted_event_is_retried_then_dead_lettered_never_published<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    enqueue(
        h,
        &outbox,
        OutboxMessage::new("library.loan.created", json!({})),
    )
    .await;
    let billing = enqueue(h, &outbox, OutboxMessage::new("billing.paid", json!({}))).await;
    let (seen, delivery) = recording();
    let router = TopicRouter::new().route("library.*", delivery).unwrap();
    let relay = OutboxRelay::new(
        outbox.clone(),
        router,
        config("relay").with_max_delivery_attempts(2),
    )
    .unwrap();
    relay.poll_once().await.unwrap();
    wait_for(
        "the unrouted event dead-lettered",
        Duration::from_secs(20),
        || async {
            relay.poll_once().await.unwrap();
            (relay.journal().backlog(&[]).await.unwrap().dead_lettered == 1).then_some(())
        },
    )
    .await;
    let dead = stored(&outbox, &billing).await;
    assert!(dead.published_at.is_none());
    assert!(
        dead.last_error
            .unwrap_or_default()
            .contains("no route takes topic \"billing.paid\""),
    );
    let topics: Vec<String> = drain(&seen).into_iter().map(|e| e.topic).collect();
    assert_eq!(topics, ["library.loan.created"]);
}
