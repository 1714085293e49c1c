//! What every broker outage test checks the same way, whatever the delivery: a keyed workload
//! written while the relay runs, the failures the relay reports with their retry schedule, and the
//! events read back from the broker (all there, each key in order).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use hare_outbox_core::delivery::{DeliveryParts, DestinationSpec};
use hare_outbox_core::{
    Backend, Delivery, DeliveryError, DeliveryReport, Outbox, OutboxEvent, OutboxMessage,
    RelayEvent, RelayObserver, TopicFilter,
};
use serde_json::json;
use uuid::Uuid;

/// The events [`spawn_keyed_writer`] wrote: event id (hyphenated text) → (ordering key, round).
pub type Written = HashMap<String, (String, u64)>;

/// Writes `rounds` rounds of one event per key on `topic` — payload `{"key": k, "n": round}`,
/// ordering key `k<k>` — one transaction per round, `pause` apart, so that an outage started
/// while it runs lands in the middle of the workload. The task returns what it wrote.
///
/// # Panics
/// (In the task.) When a write fails.
pub fn spawn_keyed_writer<B: Backend>(
    outbox: Outbox<B>,
    topic: String,
    keys: usize,
    rounds: u64,
    pause: Duration,
) -> tokio::task::JoinHandle<Written> {
    tokio::spawn(async move {
        let mut written = HashMap::new();
        for round in 0..rounds {
            let mut tx = outbox.begin().await.expect("begin");
            for key in 0..keys {
                let event = tx
                    .enqueue(
                        OutboxMessage::new(&topic, json!({"key": key, "n": round}))
                            .ordering_key(format!("k{key}")),
                    )
                    .await
                    .expect("enqueue");
                written.insert(event.id.to_string(), (format!("k{key}"), round));
            }
            tx.commit().await.expect("commit");
            tokio::time::sleep(pause).await;
        }
        written
    })
}

/// One failed delivery the relay reported, with the relay's schedule for the next attempt.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The event.
    pub event_id: Uuid,
    /// Failed attempts of the event, this one included.
    pub attempts: i32,
    /// The error text the relay stored in `last_error`.
    pub error: String,
    /// When the relay will try the event again.
    pub next_attempt_at: DateTime<Utc>,
    /// When the observer saw the report (the relay calls it right after writing the marks).
    pub seen_at: DateTime<Utc>,
}

/// Records every [`RelayEvent::DeliveryFailed`] of a relay; clones share the record.
#[derive(Debug, Clone, Default)]
pub struct FailureLog(Arc<Mutex<Vec<Failure>>>);

impl FailureLog {
    /// An empty log.
    pub fn new() -> FailureLog {
        FailureLog::default()
    }

    /// The observer to hand to [`OutboxRelay::with_observer`](hare_outbox_core::OutboxRelay::with_observer).
    pub fn observer(&self) -> impl RelayObserver {
        let log = self.clone();
        move |event: &RelayEvent| {
            if let RelayEvent::DeliveryFailed {
                event_id,
                attempts,
                error,
                next_attempt_at,
                ..
            } = event
                && let Ok(mut failures) = log.0.lock()
            {
                failures.push(Failure {
                    event_id: *event_id,
                    attempts: *attempts,
                    error: error.clone(),
                    next_attempt_at: *next_attempt_at,
                    seen_at: Utc::now(),
                });
            }
        }
    }

    /// Every failure so far, in the order reported.
    pub fn failures(&self) -> Vec<Failure> {
        self.0.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// The most failed attempts of any one event so far (0 when none failed).
    pub fn max_attempts(&self) -> i32 {
        self.failures()
            .iter()
            .map(|f| f.attempts)
            .max()
            .unwrap_or(0)
    }

    /// Asserts the failures follow the relay's backoff with `base` and `max` (jitter ±10%): each
    /// event's attempts count up by one; each scheduled delay is `min(base · 2^(n−1), max)`
    /// within the jitter; no retry happens before the time scheduled for it; and at least one
    /// event failed `min_attempts` times.
    ///
    /// # Panics
    /// When one of these does not hold.
    pub fn assert_backoff(&self, base: Duration, max: Duration, min_attempts: i32) {
        let failures = self.failures();
        let mut by_event: HashMap<Uuid, Vec<&Failure>> = HashMap::new();
        for failure in &failures {
            by_event.entry(failure.event_id).or_default().push(failure);
        }
        let most = by_event.values().map(Vec::len).max().unwrap_or(0);
        assert!(
            most >= min_attempts as usize,
            "some event should have failed {min_attempts} times; at most {most} did"
        );
        // The observer runs a moment after the relay took `now`: allow for that.
        let slack = chrono::Duration::milliseconds(250);
        for (event, list) in &by_event {
            for (i, failure) in list.iter().enumerate() {
                let first = list[0].attempts;
                assert_eq!(
                    failure.attempts,
                    first + i as i32,
                    "event {event}: attempts count up by one"
                );
                let exponent = (failure.attempts - 1).clamp(0, 30);
                let expected = (base.as_secs_f64() * 2f64.powi(exponent)).min(max.as_secs_f64());
                let scheduled = (failure.next_attempt_at - failure.seen_at).as_seconds_f64();
                let lag = slack.as_seconds_f64();
                assert!(
                    scheduled <= expected * 1.1 + 0.001 && scheduled >= expected * 0.9 - lag,
                    "event {event}, attempt {}: next attempt in {scheduled:.3} s, expected \
                     {expected:.3} s ± 10%",
                    failure.attempts
                );
                if i > 0 {
                    let due = list[i - 1].next_attempt_at;
                    assert!(
                        failure.seen_at + slack >= due,
                        "event {event}: attempt {} failed at {}, before its retry was due at {due}",
                        failure.attempts,
                        failure.seen_at
                    );
                }
            }
        }
    }
}

/// Asserts that the events read back from the broker, `(event id, ordering key, round)` in the
/// order the broker holds them (per key: one partition or one queue), are every written event —
/// duplicates allowed, since delivery is at least once — and that no event of a key first arrives
/// after a later one of that key. Returns how many messages were read (duplicates included).
///
/// # Panics
/// When an event is missing, unknown, carries another key than written, or is out of order.
pub fn assert_all_arrived_in_key_order(
    written: &Written,
    arrived: &[(String, String, u64)],
) -> usize {
    let mut seen = HashSet::new();
    let mut last: HashMap<&str, u64> = HashMap::new();
    for (id, key, n) in arrived {
        let (written_key, written_n) = written
            .get(id)
            .unwrap_or_else(|| panic!("event {id} was never written"));
        assert_eq!(
            (key, n),
            (written_key, written_n),
            "event {id} arrived with another key or round"
        );
        // A retry of a batch whose acknowledgement was lost writes its events again, after
        // later ones may have arrived: at least once, so a consumer keeps the first copy (by
        // event id). Order is judged on first arrivals: a key's event never first arrives after
        // a later one of that key.
        if !seen.insert(id.as_str()) {
            continue;
        }
        if let Some(previous) = last.insert(key, *n) {
            assert!(
                previous <= *n,
                "key {key}: round {n} first arrived after round {previous}"
            );
        }
    }
    let missing: Vec<_> = written
        .keys()
        .filter(|id| !seen.contains(id.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} events never arrived, e.g. {:?}",
        missing.len(),
        written.len(),
        missing.first()
    );
    arrived.len()
}

/// Every call a [`CountingDelivery`] passed on: when, and how many events it carried.
#[derive(Debug, Clone, Default)]
pub struct SendLog(Arc<Mutex<Vec<(std::time::Instant, usize)>>>);

impl SendLog {
    /// Calls made from `from` on, and the events they carried.
    pub fn since(&self, from: std::time::Instant) -> (usize, usize) {
        self.between(from, std::time::Instant::now() + Duration::from_secs(3600))
    }

    /// Calls made from `from` until `to`, and the events they carried.
    pub fn between(&self, from: std::time::Instant, to: std::time::Instant) -> (usize, usize) {
        let sends = self.0.lock().map(|s| s.clone()).unwrap_or_default();
        sends
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .fold((0, 0), |(calls, events), (_, n)| (calls + 1, events + n))
    }
}

/// A delivery that passes every call on to `inner` and logs it in a [`SendLog`]: how many
/// requests (batches, for a broker delivery) reach the destination.
pub struct CountingDelivery<D> {
    inner: D,
    log: SendLog,
}

impl<D: Delivery> CountingDelivery<D> {
    /// `inner`, counted; the log to read the counts from.
    pub fn new(inner: D) -> (Self, SendLog) {
        let log = SendLog::default();
        (
            CountingDelivery {
                inner,
                log: log.clone(),
            },
            log,
        )
    }

    fn count(&self, events: usize) {
        if let Ok(mut sends) = self.log.0.lock() {
            sends.push((std::time::Instant::now(), events));
        }
    }
}

#[async_trait::async_trait]
impl<D: Delivery> Delivery for CountingDelivery<D> {
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        self.count(1);
        self.inner.deliver(event).await
    }

    async fn deliver_batch_reported(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        self.count(events.len());
        self.inner
            .deliver_batch_reported(events, concurrency, timeout)
            .await
    }

    fn keeps_key_order(&self) -> bool {
        self.inner.keeps_key_order()
    }

    fn destination(&self) -> Option<&DestinationSpec> {
        self.inner.destination()
    }

    async fn destination_of(&self, event: &OutboxEvent) -> Option<String> {
        self.inner.destination_of(event).await
    }

    fn split(&self, events: &[OutboxEvent]) -> Option<DeliveryParts> {
        self.inner.split(events)
    }

    fn leasable_topics(&self, is_paused: &dyn Fn(&str) -> bool) -> TopicFilter {
        self.inner.leasable_topics(is_paused)
    }

    async fn close(&self) -> Result<(), DeliveryError> {
        self.inner.close().await
    }
}
