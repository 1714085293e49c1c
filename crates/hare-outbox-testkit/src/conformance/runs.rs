//! Ordered runs per ordering key on any backend: a hot key drains in runs in order, a failure
//! inside a run releases the rest unattempted, the walk over keys is fair, a blocked key holds
//! back only itself, `max_events_per_key = 1` takes one event per key, and a relay polls again
//! at once after any poll that leased events.
//!
//! Each public function is one scenario; a backend's test calls it on a migrated, empty outbox of
//! its own test database.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use hare_outbox_core::backend::EventLeaseParams;
use hare_outbox_core::{
    Backend, Delivery, DeliveryError, FnDelivery, JournalBackend, Outbox, OutboxEvent,
    OutboxMessage, OutboxRelay, RelayConfig,
};
use serde_json::json;

/// What a recording delivery saw, in the order it saw it: (ordering key, payload `n`).
type Seen = Arc<Mutex<Vec<(Option<String>, i64)>>>;

fn fast() -> RelayConfig {
    RelayConfig::default()
        .with_poll_interval(Duration::from_millis(20))
        .with_retry_base(Duration::from_millis(50))
        .with_retry_max(Duration::from_millis(50))
}

async fn put<B: Backend>(outbox: &Outbox<B>, key: Option<&str>, from: i64, count: i64) {
    let mut messages = Vec::new();
    for n in from..from + count {
        let mut message = OutboxMessage::new("runs.event", json!({ "n": n }));
        if let Some(key) = key {
            message = message.ordering_key(key);
        }
        messages.push(message);
    }
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_many(messages).await.unwrap();
    tx.commit().await.unwrap();
}

fn n_of(event: &OutboxEvent) -> i64 {
    event.payload["n"].as_i64().unwrap()
}

/// A per-event delivery recording what it sent; it fails the events whose `n` is in `fail_once`
/// the first time it sees them.
fn recording(seen: &Seen, fail_once: &[i64]) -> impl Delivery + use<> {
    let seen = seen.clone();
    let failing: Arc<Mutex<Vec<i64>>> = Arc::new(Mutex::new(fail_once.to_vec()));
    FnDelivery::new(move |event: OutboxEvent| {
        let seen = seen.clone();
        let failing = failing.clone();
        async move {
            let n = n_of(&event);
            seen.lock().unwrap().push((event.ordering_key.clone(), n));
            let mut failing = failing.lock().unwrap();
            if let Some(i) = failing.iter().position(|&f| f == n) {
                failing.remove(i);
                return Err(DeliveryError::new(format!("refused {n}")));
            }
            Ok(())
        }
    })
}

/// A batch delivery that keeps key order: it "sends" every event of the batch (records it) and
/// fails those in `fail_once` the first time.
struct OrderedBatch {
    seen: Seen,
    failing: Mutex<Vec<i64>>,
}

#[async_trait]
impl Delivery for OrderedBatch {
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        let n = n_of(event);
        self.seen
            .lock()
            .unwrap()
            .push((event.ordering_key.clone(), n));
        let mut failing = self.failing.lock().unwrap();
        if let Some(i) = failing.iter().position(|&f| f == n) {
            failing.remove(i);
            return Err(DeliveryError::new(format!("refused {n}")));
        }
        Ok(())
    }

    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        _concurrency: usize,
        _timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        let mut out = Vec::new();
        for event in events {
            out.push(self.deliver(event).await);
        }
        out
    }

    fn keeps_key_order(&self) -> bool {
        true
    }
}

/// Polls until a poll leases nothing; returns the polls that leased something.
async fn drain<B: Backend>(relay: &OutboxRelay<B>) -> usize {
    for polls in 0..10_000 {
        let outcome = relay.poll_once().await.unwrap();
        if outcome.leased == 0 && outcome.failed == 0 {
            // A failed event waits for its backoff; wait it out before calling the drain done.
            tokio::time::sleep(Duration::from_millis(60)).await;
            if relay.poll_once().await.unwrap().leased == 0 {
                return polls;
            }
        }
    }
    panic!("the outbox did not drain in 10,000 polls");
}

/// The `n`s seen for `key`, in order.
fn of_key(seen: &Seen, key: Option<&str>) -> Vec<i64> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.as_deref() == key)
        .map(|(_, n)| *n)
        .collect()
}

/// 250 events on one key and 10 without a key, batch 100, at most 100 per key: the first poll
/// leases a full batch (the key's run shares it with the unkeyed events); the key's events are
/// delivered exactly once each, in sequence order, in three runs.
///
/// # Panics
/// When the relay delivers out of order, twice, or in more polls than the runs need.
pub async fn a_hot_key_drains_in_ordered_runs<B: Backend>(outbox: &Outbox<B>) {
    put(outbox, Some("hot"), 0, 250).await;
    put(outbox, None, 1000, 10).await;
    let seen = Seen::default();
    let relay = OutboxRelay::new(outbox.clone(), recording(&seen, &[]), fast()).unwrap();
    let first = relay.poll_once().await.unwrap();
    assert_eq!(first.leased, 100, "{first:?}");
    assert_eq!(first.delivered, 100, "{first:?}");
    let polls = 1 + drain(&relay).await;
    assert_eq!(of_key(&seen, Some("hot")), (0..250).collect::<Vec<_>>());
    assert_eq!(of_key(&seen, None).len(), 10);
    assert!(polls <= 4, "{polls} polls for 260 events in batches of 100");
}

/// 20 keys × 20 events, a lease of 100 gathering at least 10 keys (a relay's `concurrency`):
/// the walk stops at 10 keys whose runs fill the batch — 10 consecutive events of each of
/// `k00`…`k09`, from each key's head — and the next lease, started from the cursor the first one
/// returned, takes `k10`…`k19` the same way. Gathering 100 keys instead (the default) spreads
/// the batch over all 20 keys, 5 events each.
///
/// # Panics
/// When a batch holds other keys or counts, a run is not its key's next events in order, or
/// the second lease does not start after the first one's keys.
pub async fn a_lease_takes_concurrency_keys_whose_runs_fill_the_batch<B: Backend>(
    outbox: &Outbox<B>,
) {
    let keys: Vec<String> = (0..20).map(|k| format!("k{k:02}")).collect();
    for (i, key) in keys.iter().enumerate() {
        put(outbox, Some(key), i as i64 * 100, 20).await;
    }
    let lease = |cursor: &str, min_keys: i64| {
        EventLeaseParams::new("walker".to_owned(), 100, Duration::from_secs(60))
            .with_max_events_per_key(100)
            .with_min_keys(min_keys)
            .with_key_cursor(cursor)
    };
    // The `n`s leased per key, in the batch's (sequence) order.
    let per_key = |events: &[OutboxEvent]| {
        let mut out: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
        for event in events {
            let key = event.ordering_key.clone().unwrap();
            out.entry(key).or_default().push(n_of(event));
        }
        out
    };
    let backend = outbox.backend();
    let first = backend
        .event_lease(outbox.table(), &lease("", 10))
        .await
        .unwrap();
    let got = per_key(&first.events);
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), keys[..10].to_vec());
    for (i, ns) in got.values().enumerate() {
        let from = i as i64 * 100;
        assert_eq!(ns, &(from..from + 10).collect::<Vec<_>>(), "key k{i:02}");
    }
    let cursor = first.key_cursor.clone().unwrap();
    let second = backend
        .event_lease(outbox.table(), &lease(&cursor, 10))
        .await
        .unwrap();
    let got = per_key(&second.events);
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), keys[10..].to_vec());
    for (i, ns) in got.values().enumerate() {
        let from = (10 + i) as i64 * 100;
        assert_eq!(
            ns,
            &(from..from + 10).collect::<Vec<_>>(),
            "key k{:02}",
            10 + i
        );
    }
    // Every head is leased now; the rest waits for their runs. Release both batches (marking
    // them delivered) and lease once more gathering one head per event: 20 keys × 5 events.
    let delivered: Vec<i64> = first
        .events
        .iter()
        .chain(&second.events)
        .map(|e| e.sequence)
        .collect();
    backend
        .event_mark_delivered(
            outbox.table(),
            &hare_outbox_core::backend::EventMarkDeliveredParams::new(delivered),
        )
        .await
        .unwrap();
    let spread = backend
        .event_lease(outbox.table(), &lease("", 100))
        .await
        .unwrap();
    let got = per_key(&spread.events);
    assert_eq!(got.len(), 20, "{got:?}");
    for (i, ns) in got.values().enumerate() {
        let from = i as i64 * 100 + 10;
        assert_eq!(ns, &(from..from + 5).collect::<Vec<_>>(), "key k{i:02}");
    }
}

/// With `max_events_per_key = 1` a batch holds one event per key: 3 keys × 4 events take 4 polls
/// of 3 events each, in order per key.
///
/// # Panics
/// When a batch holds two events of one key or a key goes out of order.
pub async fn one_event_per_key_when_runs_are_off<B: Backend>(outbox: &Outbox<B>) {
    for key in ["a", "b", "c"] {
        put(outbox, Some(key), 0, 4).await;
    }
    let seen = Seen::default();
    let relay = OutboxRelay::new(
        outbox.clone(),
        recording(&seen, &[]),
        fast().with_max_events_per_key(1),
    )
    .unwrap();
    for _ in 0..4 {
        let outcome = relay.poll_once().await.unwrap();
        assert_eq!((outcome.leased, outcome.delivered), (3, 3), "{outcome:?}");
    }
    assert_eq!(relay.poll_once().await.unwrap().leased, 0);
    for key in ["a", "b", "c"] {
        assert_eq!(of_key(&seen, Some(key)), vec![0, 1, 2, 3]);
    }
}

/// A key's run of 10 fails at its 4th event: 3 are delivered, the 4th counts an attempt and backs
/// off, the 6 after it are released without an attempt and never sent in that poll; after the
/// backoff the key goes on from the 4th, in order.
///
/// # Panics
/// When an event after the failure is sent before the failed one succeeds, or counts an attempt.
pub async fn a_failure_inside_a_run_releases_the_rest_unattempted<B: JournalBackend>(
    outbox: &Outbox<B>,
) {
    put(outbox, Some("k"), 0, 10).await;
    let seen = Seen::default();
    let relay = OutboxRelay::new(outbox.clone(), recording(&seen, &[3]), fast()).unwrap();
    let outcome = relay.poll_once().await.unwrap();
    assert_eq!(
        (
            outcome.leased,
            outcome.delivered,
            outcome.failed,
            outcome.released
        ),
        (10, 3, 1, 6),
        "{outcome:?}"
    );
    assert_eq!(
        of_key(&seen, Some("k")),
        vec![0, 1, 2, 3],
        "nothing after the failure is sent"
    );
    let journal =
        hare_outbox_core::journal::Journal::new(outbox.backend().clone(), outbox.table().clone());
    let page = journal
        .list(&hare_outbox_core::journal::EventQuery::new())
        .await
        .unwrap();
    for event in &page.events {
        let n = n_of(event);
        let expected_attempts = i32::from(n == 3);
        assert_eq!(event.attempts, expected_attempts, "event {n}");
        assert!(event.lease_until.is_none(), "event {n} is still leased");
        if n > 3 {
            assert!(
                event.last_error.is_none() && event.next_attempt_at.is_none(),
                "event {n}"
            );
        }
    }
    drain(&relay).await;
    assert_eq!(
        of_key(&seen, Some("k")),
        vec![0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9]
    );
}

/// The same failure through a delivery that sends the whole run in one ordered batch: the events
/// it reported delivered after the failed one are released too (sent again later, after the
/// failed one: at least once, in order).
///
/// # Panics
/// When an event after the failure is marked published before the failed one.
pub async fn a_failure_inside_an_ordered_batch_releases_the_rest<B: Backend>(outbox: &Outbox<B>) {
    put(outbox, Some("k"), 0, 6).await;
    let seen = Seen::default();
    let delivery = OrderedBatch {
        seen: seen.clone(),
        failing: Mutex::new(vec![2]),
    };
    let relay = OutboxRelay::new(outbox.clone(), delivery, fast()).unwrap();
    let outcome = relay.poll_once().await.unwrap();
    assert_eq!(
        (outcome.delivered, outcome.failed, outcome.released),
        (2, 1, 3),
        "{outcome:?}"
    );
    drain(&relay).await;
    let seen = of_key(&seen, Some("k"));
    // The first batch went out whole; from the failed event on, everything again, in order.
    assert_eq!(seen, vec![0, 1, 2, 3, 4, 5, 2, 3, 4, 5]);
}

/// 300 keys × 2 events, batch 100, one event per key: three polls serve 300 different keys (the
/// walk over keys resumes after the last key served), not the first 100 keys twice.
///
/// # Panics
/// When a key is served twice before every key was served once.
pub async fn the_walk_over_keys_serves_every_key_in_turn<B: Backend>(outbox: &Outbox<B>) {
    let mut messages = Vec::new();
    for round in 0..2 {
        for key in 0..300 {
            messages.push(
                OutboxMessage::new("runs.event", json!({ "n": round * 1000 + key }))
                    .ordering_key(format!("key-{key:03}")),
            );
        }
    }
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_many(messages).await.unwrap();
    tx.commit().await.unwrap();
    let seen = Seen::default();
    let relay = OutboxRelay::new(
        outbox.clone(),
        recording(&seen, &[]),
        fast().with_max_events_per_key(1),
    )
    .unwrap();
    for _ in 0..3 {
        assert_eq!(relay.poll_once().await.unwrap().delivered, 100);
    }
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for (key, _) in seen.lock().unwrap().iter() {
        *per_key.entry(key.clone().unwrap()).or_default() += 1;
    }
    assert_eq!(
        per_key.len(),
        300,
        "three polls served {} keys",
        per_key.len()
    );
    assert!(per_key.values().all(|&n| n == 1));
    drain(&relay).await;
    assert_eq!(seen.lock().unwrap().len(), 600);
}

/// A key whose head is dead-lettered holds back its 300 later events, and only those: the other
/// keys and the unkeyed events keep flowing.
///
/// # Panics
/// When a held-back event is delivered or another key waits.
pub async fn a_dead_head_holds_back_only_its_key<B: JournalBackend>(outbox: &Outbox<B>) {
    put(outbox, Some("stuck"), 0, 301).await;
    for key in 0..20 {
        put(outbox, Some(&format!("free-{key}")), 1000 + key * 10, 3).await;
    }
    put(outbox, None, 5000, 5).await;
    let seen = Seen::default();
    let relay = OutboxRelay::new(
        outbox.clone(),
        recording(&seen, &[0]),
        fast().with_max_delivery_attempts(1),
    )
    .unwrap();
    drain(&relay).await;
    assert_eq!(
        of_key(&seen, Some("stuck")),
        vec![0],
        "only the head was tried"
    );
    for key in 0..20 {
        let from = 1000 + key * 10;
        assert_eq!(
            of_key(&seen, Some(&format!("free-{key}"))),
            vec![from, from + 1, from + 2]
        );
    }
    assert_eq!(of_key(&seen, None).len(), 5);
    let backlog = relay.journal().backlog(&[]).await.unwrap();
    assert_eq!((backlog.pending, backlog.dead_lettered), (300, 1));
}

/// A running relay with a 60 s poll interval and no wake-up drains 3 keys × 5 events (batches of
/// 3, never full) in well under one poll interval: after a poll that leased anything it polls
/// again at once (seed 001 § «Один опрос»).
///
/// # Panics
/// When the backlog is not delivered within 10 s.
pub async fn a_poll_that_leased_anything_polls_again_at_once<B: Backend>(outbox: &Outbox<B>) {
    for key in ["a", "b", "c"] {
        put(outbox, Some(key), 0, 5).await;
    }
    let seen = Seen::default();
    let relay = OutboxRelay::new(
        outbox.clone(),
        recording(&seen, &[]),
        fast()
            .with_max_events_per_key(1)
            .with_poll_interval(Duration::from_secs(60)),
    )
    .unwrap();
    relay.start().unwrap();
    crate::wait_for("15 events delivered", Duration::from_secs(10), || async {
        (seen.lock().unwrap().len() == 15).then_some(())
    })
    .await;
    relay.stop().await.unwrap();
    assert!(relay.stats().polls >= 5, "{:?}", relay.stats());
}
