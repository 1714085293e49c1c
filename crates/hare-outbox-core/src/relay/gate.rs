//! Sending through each destination's circuit breaker and rate limit.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::GuardedDelivery;
use super::breaker::{Admission, Breaker, BreakerConfig, Destinations, Outcome, Verdict};
use crate::delivery::{
    Delivery, DeliveryReport, DestinationSpec, deliver_in_key_order, deliver_parts, key_runs,
};
use crate::error::{DeliveryError, DeliveryErrorKind};
use crate::event::OutboxEvent;
use crate::topic::TopicFilter;

/// The destination name of a delivery that is not a [`Destination`](crate::Destination).
pub const DEFAULT_DESTINATION: &str = "delivery";

/// What the next lease may take.
pub(crate) enum LeaseScope {
    /// Nothing: the relay's only destination is open; its probe is due at this instant.
    Paused(Instant),
    /// Topics of this filter (every topic but those of open routes).
    Topics(TopicFilter),
}

/// The breakers of one relay's destinations and how to make new ones.
pub(crate) struct Gates {
    pub(crate) destinations: Destinations,
    breaker: BreakerConfig,
    table: String,
    retry_max: Duration,
    concurrency: usize,
}

impl Gates {
    pub(crate) fn new(
        destinations: Destinations,
        breaker: BreakerConfig,
        table: String,
        retry_max: Duration,
        concurrency: usize,
    ) -> Self {
        Gates {
            destinations,
            breaker,
            table,
            retry_max,
            concurrency,
        }
    }

    /// The breaker of `name`, made with `spec`'s settings (else the relay's) the first time.
    fn breaker(&self, name: &str, spec: Option<&DestinationSpec>) -> Arc<Breaker> {
        self.destinations.get_or_insert(name, || {
            let config = spec
                .and_then(|s| s.breaker.clone())
                .unwrap_or_else(|| self.breaker.clone());
            Breaker::new(
                name,
                &self.table,
                config,
                spec.and_then(|s| s.max_per_second),
                self.retry_max,
                self.concurrency,
            )
        })
    }

    /// What the next lease of `delivery`'s events may take.
    pub(crate) fn lease_scope(&self, delivery: &dyn Delivery) -> LeaseScope {
        if let Some(at) = self.destinations.paused_until(&root_name(delivery)) {
            return LeaseScope::Paused(at);
        }
        LeaseScope::Topics(delivery.leasable_topics(&|name| self.destinations.is_paused(name)))
    }

    /// Delivers `events` through `delivery`, each destination's part through its breaker and
    /// rate limit, keeping each key's order; nothing starts once `lease_lost` is cancelled.
    pub(crate) async fn deliver(
        &self,
        delivery: &Arc<dyn Delivery>,
        lease_lost: &CancellationToken,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        let guard = |inner: Arc<dyn Delivery>| GuardedDelivery {
            inner,
            lease_lost: lease_lost.clone(),
        };
        match delivery.split(events) {
            None => {
                let guarded = guard(delivery.clone());
                let name = root_name(delivery.as_ref());
                self.send_part(
                    &name,
                    delivery.destination(),
                    &guarded,
                    events,
                    concurrency,
                    timeout,
                )
                .await
            }
            Some(split) => {
                deliver_parts(
                    split,
                    events,
                    concurrency,
                    |name, delivery, batch, share| {
                        let guarded = guard(delivery.clone());
                        Box::pin(async move {
                            self.send_part(
                                &name,
                                delivery.destination(),
                                &guarded,
                                &batch,
                                share,
                                timeout,
                            )
                            .await
                        })
                    },
                )
                .await
            }
        }
    }

    /// Sends one destination's events.
    async fn send_part(
        &self,
        name: &str,
        spec: Option<&DestinationSpec>,
        delivery: &dyn Delivery,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        let breaker = self.breaker(name, spec);
        if !breaker.is_active() {
            return deliver_in_key_order(delivery, events, concurrency, timeout).await;
        }
        if delivery.keeps_key_order() {
            send_chunks(&breaker, delivery, events, concurrency, timeout).await
        } else {
            self.send_each(name, spec, &breaker, delivery, events, concurrency, timeout)
                .await
        }
    }

    /// Sends event by event, each key's run in order (the next only after the previous
    /// succeeded), keys in parallel; each send asks its destination (or sub-destination)
    /// first.
    #[allow(clippy::too_many_arguments)]
    async fn send_each(
        &self,
        name: &str,
        spec: Option<&DestinationSpec>,
        breaker: &Arc<Breaker>,
        delivery: &dyn Delivery,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        let runs = key_runs(events);
        let sends = runs.into_iter().map(|run| async move {
            let mut out = Vec::with_capacity(run.len());
            let mut failed = false;
            for i in run {
                if failed {
                    out.push((i, not_attempted()));
                    continue;
                }
                let event = &events[i];
                let breaker = match delivery.destination_of(event).await {
                    Some(sub) => self.breaker(&format!("{name}/{sub}"), spec),
                    None => breaker.clone(),
                };
                let report = match breaker.admit(timeout).await {
                    Admission::Refused(wait) => deferred(&breaker, wait),
                    Admission::Go(permit) => {
                        breaker.pace(1).await;
                        let report = delivery
                            .deliver_batch_reported(std::slice::from_ref(event), 1, timeout)
                            .await
                            .into_iter()
                            .next()
                            .unwrap_or_else(|| {
                                DeliveryReport::new(Err(DeliveryError::new(
                                    "the delivery returned no result",
                                )))
                            });
                        let verdict = permit.finish(&[outcome_of(&report)]);
                        judged(report, verdict.first().copied())
                    }
                };
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
            .map(|r| r.unwrap_or_else(not_attempted))
            .collect()
    }
}

/// Sends a delivery that keeps key order in chunks, each asked of the breaker first: the whole
/// batch in one chunk when the destination is closed and has no rate limit; one event as a
/// probe; at most one second's worth under a rate limit; the slow start's share after a close.
async fn send_chunks(
    breaker: &Arc<Breaker>,
    delivery: &dyn Delivery,
    events: &[OutboxEvent],
    concurrency: usize,
    timeout: Duration,
) -> Vec<DeliveryReport> {
    let mut reports: Vec<Option<DeliveryReport>> = (0..events.len()).map(|_| None).collect();
    let mut failed_keys: HashSet<&str> = HashSet::new();
    let mut next = 0;
    while next < events.len() {
        let permit = match breaker.admit(timeout).await {
            Admission::Go(permit) => permit,
            Admission::Refused(wait) => {
                for (i, slot) in reports.iter_mut().enumerate().skip(next) {
                    let held = events[i]
                        .ordering_key
                        .as_deref()
                        .is_some_and(|k| failed_keys.contains(k));
                    *slot = Some(if held {
                        not_attempted()
                    } else {
                        deferred(breaker, wait)
                    });
                }
                break;
            }
        };
        let limit = breaker.chunk_limit(&permit);
        let mut chunk = Vec::new();
        while next < events.len() && chunk.len() < limit {
            let held = events[next]
                .ordering_key
                .as_deref()
                .is_some_and(|k| failed_keys.contains(k));
            if held {
                reports[next] = Some(not_attempted());
            } else {
                chunk.push(next);
            }
            next += 1;
        }
        if chunk.is_empty() {
            permit.finish(&[Outcome::Skipped]);
            continue;
        }
        breaker.pace(chunk.len()).await;
        let whole = chunk.len() == events.len();
        let out = if whole {
            delivery
                .deliver_batch_reported(events, concurrency, timeout)
                .await
        } else {
            let batch: Vec<OutboxEvent> = chunk.iter().map(|&i| events[i].clone()).collect();
            delivery
                .deliver_batch_reported(&batch, concurrency, timeout)
                .await
        };
        let outcomes: Vec<Outcome> = out.iter().map(outcome_of).collect();
        let verdicts = permit.finish(&outcomes);
        let mut out = out.into_iter();
        for (n, &i) in chunk.iter().enumerate() {
            let report = out.next().unwrap_or_else(|| {
                DeliveryReport::new(Err(DeliveryError::new(format!(
                    "the delivery returned fewer results than the {} events sent",
                    chunk.len()
                ))))
            });
            let report = judged(report, verdicts.get(n).copied());
            if report.result.is_err()
                && let Some(k) = events[i].ordering_key.as_deref()
            {
                failed_keys.insert(k);
            }
            reports[i] = Some(report);
        }
    }
    reports
        .into_iter()
        .map(|r| r.unwrap_or_else(not_attempted))
        .collect()
}

/// The destination name of a relay's delivery: its [`Destination`](crate::Destination) name,
/// else [`DEFAULT_DESTINATION`].
pub(crate) fn root_name(delivery: &dyn Delivery) -> String {
    delivery
        .destination()
        .map_or_else(|| DEFAULT_DESTINATION.to_owned(), |spec| spec.name.clone())
}

/// How the breaker sees a report.
fn outcome_of(report: &DeliveryReport) -> Outcome {
    match &report.result {
        Ok(()) => Outcome::Answered,
        Err(e) if e.is_not_attempted() => Outcome::Skipped,
        Err(e) => match e.kind() {
            DeliveryErrorKind::Outage => Outcome::Outage {
                retry_after: None,
                reason: e.chain(),
            },
            DeliveryErrorKind::RetryAfter(after) => Outcome::Outage {
                retry_after: Some(after),
                reason: e.chain(),
            },
            _ => Outcome::Answered,
        },
    }
}

/// The report with an outage failure turned into a deferral when the breaker says so.
fn judged(mut report: DeliveryReport, verdict: Option<Verdict>) -> DeliveryReport {
    if let (Some(Verdict::Deferred(wait)), Err(error)) = (verdict, &mut report.result)
        && error.kind().is_outage()
    {
        let taken = std::mem::replace(error, DeliveryError::new(""));
        *error = taken.deferred(wait);
    }
    report
}

/// The report of an event not sent because its destination is open.
fn deferred(breaker: &Breaker, wait: Duration) -> DeliveryReport {
    let status = breaker.status();
    let mut text = format!(
        "not sent: destination {} is open (circuit breaker); tried again at its next probe",
        status.name
    );
    if let Some(reason) = status.reason {
        text.push_str("; it opened after: ");
        text.push_str(&reason);
    }
    DeliveryReport::new(Err(DeliveryError::outage(text).deferred(wait)))
}

fn not_attempted() -> DeliveryReport {
    DeliveryReport::new(Err(DeliveryError::not_attempted(
        crate::delivery::NOT_ATTEMPTED,
    )))
}
