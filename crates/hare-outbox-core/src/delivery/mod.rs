//! The delivery seam: where the relay sends events.

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;

use crate::error::DeliveryError;
use crate::event::OutboxEvent;
use crate::topic::TopicFilter;

mod config;
mod destination;
mod func;
mod jsonl;
mod router;

pub use config::DeliveryConfig;
pub use destination::{Destination, DestinationSpec};
pub use func::FnDelivery;
pub use jsonl::{JsonLinesDelivery, json_line};
pub use router::TopicRouter;

/// What one delivery attempt of one event came to: its result and, optionally, a JSON record
/// of the attempt that the relay stores in [`RelayConfig::result_column`](crate::RelayConfig)
/// when one is configured.
///
/// A delivery that keeps no record leaves `record` at `None`; the relay then leaves the result
/// column as it was.
#[derive(Debug)]
#[non_exhaustive]
pub struct DeliveryReport {
    /// `Ok` when the event went out, else why not.
    pub result: Result<(), DeliveryError>,
    /// The record of the attempt, e.g. a webhook's `{"status_code", "body", "error"}`.
    pub record: Option<serde_json::Value>,
}

impl DeliveryReport {
    /// A report of `result` without a record.
    pub fn new(result: Result<(), DeliveryError>) -> Self {
        DeliveryReport {
            result,
            record: None,
        }
    }

    /// Adds the record of the attempt.
    pub fn with_record(mut self, record: serde_json::Value) -> Self {
        self.record = Some(record);
        self
    }
}

impl From<Result<(), DeliveryError>> for DeliveryReport {
    fn from(result: Result<(), DeliveryError>) -> Self {
        DeliveryReport::new(result)
    }
}

/// Sends events somewhere. A delivery only sends: retries, attempt counting and dead letters
/// belong to the relay.
///
/// Every built-in delivery sends [`OutboxEvent::body`] as the body and
/// [`OutboxEvent::message_headers`] as headers, so receivers can drop duplicates by
/// `hare-outbox-event-id` (delivery is at least once).
#[async_trait]
pub trait Delivery: Send + Sync + 'static {
    /// Sends one event.
    ///
    /// # Errors
    /// A [`DeliveryError`] saying why the event did not go out; the relay records it and retries.
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError>;

    /// Sends a batch and returns one result per event, in the order of `events`.
    ///
    /// Unless the delivery [keeps key order](Delivery::keeps_key_order), the relay hands it
    /// batches with at most one event per ordering key, whose events may go out in any order.
    /// The default sends up to `concurrency` events at once through [`Delivery::deliver`], each
    /// within `timeout` (an event that takes longer fails with a timeout error). An implementation
    /// that sends the batch as a whole must itself keep within `timeout`.
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        let sends: Vec<futures::future::BoxFuture<'_, Result<(), DeliveryError>>> = events
            .iter()
            .map(|event| {
                Box::pin(async move {
                    match tokio::time::timeout(timeout, self.deliver(event)).await {
                        Ok(result) => result,
                        Err(_) => Err(DeliveryError::outage(format!(
                            "delivery timed out after {:.3} s",
                            timeout.as_secs_f64()
                        ))),
                    }
                }) as futures::future::BoxFuture<'_, _>
            })
            .collect();
        futures::stream::iter(sends)
            .buffered(concurrency.max(1))
            .collect()
            .await
    }

    /// Sends a batch like [`Delivery::deliver_batch`] and returns one [`DeliveryReport`] per
    /// event, in the order of `events`; the relay calls this one.
    ///
    /// The default calls [`Delivery::deliver_batch`] and reports its results without records. A
    /// delivery that records its attempts (the webhook's response) overrides it; it must keep
    /// within `timeout` per event like [`Delivery::deliver_batch`].
    async fn deliver_batch_reported(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        self.deliver_batch(events, concurrency, timeout)
            .await
            .into_iter()
            .map(DeliveryReport::new)
            .collect()
    }

    /// Whether [`Delivery::deliver_batch_reported`] keeps the order of the events of one ordering
    /// key: it sends them in the order of the batch and the destination keeps that order (one
    /// Kafka partition per key with an idempotent producer, one Redis pipeline, one AMQP channel,
    /// one NATS connection). The relay then hands it ordered runs of several events per key in
    /// one batch; otherwise it sends a key's run one event after the other (the next only after
    /// the previous succeeded), different keys in parallel. Defaults to `false`.
    fn keeps_key_order(&self) -> bool {
        false
    }

    /// Releases connections. Called once by the relay when it stops. Defaults to nothing.
    ///
    /// # Errors
    /// A [`DeliveryError`] when closing failed; the relay logs it.
    async fn close(&self) -> Result<(), DeliveryError> {
        Ok(())
    }

    /// This delivery's name and its own circuit breaker and rate-limit settings, as a
    /// [`Destination`] gives them. Defaults to `None`: the relay names it (`delivery`, or the
    /// route's pattern behind a [`TopicRouter`]) and applies its own breaker options.
    fn destination(&self) -> Option<&DestinationSpec> {
        None
    }

    /// The endpoint `event` goes to within this delivery, for a delivery that sends different
    /// events to different endpoints (a webhook with per-event targets answers with the target's
    /// `host:port`). The relay gives each such endpoint a circuit breaker and rate limit of its
    /// own, named `<destination>/<endpoint>`. Only asked of deliveries that send event by event
    /// ([`keeps_key_order`](Delivery::keeps_key_order) `false`). Defaults to `None`: the
    /// delivery is one endpoint.
    async fn destination_of(&self, event: &OutboxEvent) -> Option<String> {
        let _ = event;
        None
    }

    /// For a delivery that hands events on to other deliveries ([`TopicRouter`]): the batch
    /// split by destination, so that the relay can apply each one's circuit breaker and rate
    /// limit. Defaults to `None`: the delivery is one destination.
    fn split(&self, events: &[OutboxEvent]) -> Option<DeliveryParts> {
        let _ = events;
        None
    }

    /// The topics the relay may lease while the destinations for which `is_paused(name)` holds
    /// are open: a [`TopicRouter`] leaves out the topics of its open routes, so their events are
    /// not leased (and released again) while nothing can be sent to them. Defaults to every
    /// topic.
    fn leasable_topics(&self, is_paused: &dyn Fn(&str) -> bool) -> TopicFilter {
        let _ = is_paused;
        TopicFilter::all()
    }
}

/// One destination's share of a batch: see [`Delivery::split`].
#[non_exhaustive]
pub struct DeliveryPart {
    /// The destination's name: its [`Destination`] name, else the route's pattern.
    pub name: String,
    /// Where its events go.
    pub delivery: std::sync::Arc<dyn Delivery>,
    /// Indexes of its events in the batch, in batch order.
    pub events: Vec<usize>,
}

impl DeliveryPart {
    /// The part of `delivery`, named `name`, holding the events at `events`.
    pub fn new(
        name: impl Into<String>,
        delivery: std::sync::Arc<dyn Delivery>,
        events: Vec<usize>,
    ) -> Self {
        DeliveryPart {
            name: name.into(),
            delivery,
            events,
        }
    }
}

/// A batch split by destination: see [`Delivery::split`].
#[derive(Default)]
#[non_exhaustive]
pub struct DeliveryParts {
    /// The parts, each with its destination's events.
    pub parts: Vec<DeliveryPart>,
    /// Events settled without a send, with their report: no route takes them, or they wait
    /// behind an earlier event of their ordering key that goes elsewhere.
    pub settled: Vec<(usize, DeliveryReport)>,
}

impl std::fmt::Debug for DeliveryParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryParts")
            .field(
                "parts",
                &self
                    .parts
                    .iter()
                    .map(|p| (p.name.as_str(), p.events.len()))
                    .collect::<Vec<_>>(),
            )
            .field("settled", &self.settled.len())
            .finish()
    }
}

/// Sends the parts of a split batch at the same time, each through `send(its name, its
/// delivery, its events, its share of the concurrency)`, and puts the reports back in the
/// batch's order. The parts share `concurrency`: each holds a share of it (at least 1) while it
/// runs.
pub(crate) async fn deliver_parts<'a, F>(
    split: DeliveryParts,
    events: &[OutboxEvent],
    concurrency: usize,
    send: F,
) -> Vec<DeliveryReport>
where
    F: Fn(
        String,
        std::sync::Arc<dyn Delivery>,
        Vec<OutboxEvent>,
        usize,
    ) -> futures::future::BoxFuture<'a, Vec<DeliveryReport>>,
{
    let mut results: Vec<Option<DeliveryReport>> = (0..events.len()).map(|_| None).collect();
    for (i, report) in split.settled {
        if let Some(slot) = results.get_mut(i) {
            *slot = Some(report);
        }
    }
    let concurrency = concurrency.max(1);
    let total: usize = split.parts.iter().map(|p| p.events.len()).sum();
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency));
    let send = &send;
    let sends = split.parts.into_iter().map(|part| {
        let permits = permits.clone();
        async move {
            // This part's share of the concurrency, held while it runs.
            let share = (concurrency * part.events.len() / total.max(1)).clamp(1, concurrency);
            let _held = permits.acquire_many(share as u32).await.ok();
            let batch: Vec<OutboxEvent> = part.events.iter().map(|&i| events[i].clone()).collect();
            let out = send(part.name, part.delivery, batch, share).await;
            (part.events, out)
        }
    });
    for (indexes, out) in futures::future::join_all(sends).await {
        let mut out = out.into_iter();
        for i in indexes {
            results[i] = Some(out.next().unwrap_or_else(|| {
                Err(DeliveryError::new(
                    "the route's delivery returned too few results",
                ))
                .into()
            }));
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(DeliveryError::new("event not routed")).into()))
        .collect()
}

#[async_trait]
impl<D: Delivery + ?Sized> Delivery for std::sync::Arc<D> {
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        (**self).deliver(event).await
    }
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        (**self).deliver_batch(events, concurrency, timeout).await
    }
    async fn deliver_batch_reported(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        (**self)
            .deliver_batch_reported(events, concurrency, timeout)
            .await
    }
    fn keeps_key_order(&self) -> bool {
        (**self).keeps_key_order()
    }
    async fn close(&self) -> Result<(), DeliveryError> {
        (**self).close().await
    }
    fn destination(&self) -> Option<&DestinationSpec> {
        (**self).destination()
    }
    async fn destination_of(&self, event: &OutboxEvent) -> Option<String> {
        (**self).destination_of(event).await
    }
    fn split(&self, events: &[OutboxEvent]) -> Option<DeliveryParts> {
        (**self).split(events)
    }
    fn leasable_topics(&self, is_paused: &dyn Fn(&str) -> bool) -> TopicFilter {
        (**self).leasable_topics(is_paused)
    }
}

/// The text of the result given to an event that was not attempted because an earlier event of
/// its ordering key in the same batch failed (or the batch's lease was lost).
pub const NOT_ATTEMPTED: &str = "not attempted: an earlier event of its ordering key failed";

/// Delivers `events` (in sequence order, possibly several per ordering key) keeping each key's
/// order, and returns one report per event in the order of `events`.
///
/// A delivery that [keeps key order](Delivery::keeps_key_order), or a batch with at most one
/// event per key, goes out in one [`Delivery::deliver_batch_reported`] call. Otherwise each key's
/// events are sent one after the other, each as a batch of one, the next only after the previous
/// succeeded; after a failure the rest of that key's events are reported as [`NOT_ATTEMPTED`]
/// errors without being sent. Keys (and events without a key) run in parallel, at most
/// `concurrency` at once; each send within `timeout`.
pub async fn deliver_in_key_order(
    delivery: &dyn Delivery,
    events: &[OutboxEvent],
    concurrency: usize,
    timeout: Duration,
) -> Vec<DeliveryReport> {
    let runs = key_runs(events);
    if delivery.keeps_key_order() || runs.iter().all(|run| run.len() == 1) {
        return delivery
            .deliver_batch_reported(events, concurrency, timeout)
            .await;
    }
    let sends = runs.into_iter().map(|run| async move {
        let mut out = Vec::with_capacity(run.len());
        let mut failed = false;
        for i in run {
            if failed {
                out.push((
                    i,
                    DeliveryReport::new(Err(DeliveryError::not_attempted(NOT_ATTEMPTED))),
                ));
                continue;
            }
            let report = delivery
                .deliver_batch_reported(std::slice::from_ref(&events[i]), 1, timeout)
                .await
                .into_iter()
                .next()
                .unwrap_or_else(|| {
                    DeliveryReport::new(Err(DeliveryError::new("the delivery returned no result")))
                });
            failed = report.result.is_err();
            out.push((i, report));
        }
        out
    });
    let mut reports: Vec<Option<DeliveryReport>> = (0..events.len()).map(|_| None).collect();
    let done: Vec<Vec<(usize, DeliveryReport)>> = futures::stream::iter(sends)
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    for (i, report) in done.into_iter().flatten() {
        reports[i] = Some(report);
    }
    reports
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                DeliveryReport::new(Err(DeliveryError::not_attempted(NOT_ATTEMPTED)))
            })
        })
        .collect()
}

/// The indexes of `events` grouped by ordering key in batch order; each event without a key is
/// a run of its own.
pub(crate) fn key_runs(events: &[OutboxEvent]) -> Vec<Vec<usize>> {
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut by_key: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, event) in events.iter().enumerate() {
        match event.ordering_key.as_deref() {
            Some(key) => match by_key.get(key) {
                Some(&run) => runs[run].push(i),
                None => {
                    by_key.insert(key, runs.len());
                    runs.push(vec![i]);
                }
            },
            None => runs.push(vec![i]),
        }
    }
    runs
}

impl std::fmt::Debug for dyn Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn Delivery")
    }
}

/// The shared adaptor of deliveries that send a whole batch in one go (one pipeline, one
/// channel, one producer flush): such a delivery implements [`BatchDelivery::send_batch`] and
/// its [`Delivery::deliver`] and [`Delivery::deliver_batch`] call
/// [`BatchDelivery::deliver_one`] and [`BatchDelivery::deliver_all`].
///
/// `concurrency` does not apply to such a batch: every event of it is in flight at once, and
/// the batch must finish within the shorter of the relay's timeout and the delivery's own
/// ([`BatchDelivery::batch_timeout`]).
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use async_trait::async_trait;
/// use hare_outbox_core::delivery::BatchDelivery;
/// use hare_outbox_core::{Delivery, DeliveryError, OutboxEvent};
///
/// struct Counting;
///
/// #[async_trait]
/// impl BatchDelivery for Counting {
///     fn batch_timeout(&self) -> Duration {
///         Duration::from_secs(5)
///     }
///
///     async fn send_batch(
///         &self,
///         events: &[OutboxEvent],
///         _timeout: Duration,
///     ) -> Vec<Result<(), DeliveryError>> {
///         events.iter().map(|_| Ok(())).collect()
///     }
/// }
///
/// #[async_trait]
/// impl Delivery for Counting {
///     async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
///         self.deliver_one(event).await
///     }
///
///     async fn deliver_batch(
///         &self,
///         events: &[OutboxEvent],
///         _concurrency: usize,
///         timeout: Duration,
///     ) -> Vec<Result<(), DeliveryError>> {
///         self.deliver_all(events, timeout).await
///     }
/// }
/// ```
#[async_trait]
pub trait BatchDelivery: Send + Sync + 'static {
    /// The delivery's own timeout of one batch (its `with_timeout`).
    fn batch_timeout(&self) -> Duration;

    /// Sends `events` at once and waits for each acknowledgement within `timeout`; one result
    /// per event, in the order of `events`. Called with at least one event.
    async fn send_batch(
        &self,
        events: &[OutboxEvent],
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>>;

    /// [`Delivery::deliver`] for a batching delivery: a batch of one within
    /// [`BatchDelivery::batch_timeout`].
    ///
    /// # Errors
    /// The event's [`DeliveryError`], or one saying that no result came for it.
    async fn deliver_one(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        self.send_batch(std::slice::from_ref(event), self.batch_timeout())
            .await
            .pop()
            .unwrap_or_else(|| Err(DeliveryError::new("no result for the event")))
    }

    /// [`Delivery::deliver_batch`] for a batching delivery: nothing for no events, else the
    /// whole batch within the shorter of `timeout` and [`BatchDelivery::batch_timeout`].
    async fn deliver_all(
        &self,
        events: &[OutboxEvent],
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        if events.is_empty() {
            return Vec::new();
        }
        self.send_batch(events, timeout.min(self.batch_timeout()))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of one key through a per-event delivery goes one event at a time in order, stops at
    /// the first failure, and other keys go on in parallel.
    #[tokio::test]
    async fn runs_go_in_order_one_at_a_time_and_stop_at_a_failure() {
        use std::sync::Mutex;
        let seen: std::sync::Arc<Mutex<Vec<(String, i64)>>> = Default::default();
        let log = seen.clone();
        let delivery = FnDelivery::new(move |e: OutboxEvent| {
            let log = log.clone();
            async move {
                let n = e.payload.as_i64().unwrap_or_default();
                log.lock()
                    .unwrap()
                    .push((e.ordering_key.clone().unwrap_or_default(), n));
                if n == 2 {
                    return Err(DeliveryError::new("refused"));
                }
                Ok(())
            }
        });
        let event = |key: &str, n: i64| OutboxEvent {
            ordering_key: Some(key.into()),
            ..OutboxEvent::new("t".to_owned(), serde_json::json!(n))
        };
        let events = [
            event("a", 0),
            event("b", 10),
            event("a", 1),
            event("a", 2),
            event("b", 11),
            event("a", 3),
        ];
        let reports = deliver_in_key_order(&delivery, &events, 4, Duration::from_secs(5)).await;
        let a: Vec<i64> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k == "a")
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(a, vec![0, 1, 2], "3 is never sent after 2 failed");
        assert!(
            reports[3].result.is_err()
                && !reports[3].result.as_ref().unwrap_err().is_not_attempted()
        );
        assert!(reports[5].result.as_ref().unwrap_err().is_not_attempted());
        assert!(reports[1].result.is_ok() && reports[4].result.is_ok());
        assert_eq!(key_runs(&events), vec![vec![0, 2, 3, 5], vec![1, 4]]);
    }

    #[tokio::test]
    async fn default_reports_keep_results_in_order_without_records() {
        let delivery = FnDelivery::new(|event: OutboxEvent| async move {
            if event.topic == "bad" {
                Err(DeliveryError::new("refused"))
            } else {
                Ok(())
            }
        });
        let events = [
            OutboxEvent::new("good".to_owned(), serde_json::json!({})),
            OutboxEvent::new("bad".to_owned(), serde_json::json!({})),
        ];
        let reports = std::sync::Arc::new(delivery)
            .deliver_batch_reported(&events, 2, Duration::from_secs(5))
            .await;
        assert_eq!(reports.len(), 2);
        assert!(reports[0].result.is_ok());
        assert_eq!(
            reports[1].result.as_ref().unwrap_err().to_string(),
            "refused"
        );
        assert!(reports.iter().all(|r| r.record.is_none()));
        let report = DeliveryReport::new(Ok(())).with_record(serde_json::json!({"a": 1}));
        assert_eq!(report.record, Some(serde_json::json!({"a": 1})));
    }
}
